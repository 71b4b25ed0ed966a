// Naive double-precision references for the kernel tests, and random inputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace photon::test {

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// Largest |a - b| / (atol + rtol * |b|) over the elements: <= 1 means within tolerance.
inline double max_violation(const std::vector<float>& a, const std::vector<double>& b, double atol, double rtol) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / (atol + rtol * std::abs(b[i])));
  }
  return worst;
}

/// Largest |a - b| over the elements; infinity when the lengths differ.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::abs(a[i] - b[i])));
  return d;
}

}  // namespace photon::test
