// e^x for softmaxes on the CPU, written so that a loop of them vectorises (std::exp does not).
#pragma once

#include <bit>
#include <cstdint>

namespace photon::cpu {

/// e^x for x <= 0 (a softmax's logit minus its row maximum): 2^n e^r with n the nearest integer to x / ln 2 (by the
/// 1.5 * 2^23 rounding trick), r = x - n ln 2 in two parts, and Cephes' degree-6 polynomial for e^r on [-ln 2 / 2,
/// ln 2 / 2] (within 2 ulp of std::exp). x below -87 (where e^x is denormal or less, against the row maximum's e^0 =
/// 1) gives e^-87; a NaN stays NaN, as with std::exp (and is never converted to an integer).
inline float exp_nonpositive(float x) {
  const float c = x > -87.0f ? x : -87.0f;
  const float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = c - n * 0.693359375f;
  r -= n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float e = p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x == x ? e : x;
}

}  // namespace photon::cpu
