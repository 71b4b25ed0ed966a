// Dummy weights on the CPU: core/dummy_weights.hpp's formula, element for element the same bits. Making a 1B-parameter
// model is 1.2 billion evaluations of it, so CPUs with AVX2 evaluate four at a time: SplitMix64's 64-bit products
// from 32-bit ones, the 53-bit draw converted to double exactly, then the scalar code's double and float operations
// in its order (no fused multiply-adds), so the rounding is the same.
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "core/dummy_weights.hpp"
#include "cpu/isa.hpp"
#include "cpu/kernels.hpp"

namespace photon::cpu {
namespace {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kChunkMul = 0xd1b54a32d192ed03ull;
constexpr int64_t kChunk = int64_t{1} << 16;

void row_portable(const DummyFill& f, int64_t r, float* out) {
  for (int64_t c = 0; c < f.cols; ++c) out[c] = dummy_value(f, r, c);
}

#define PHOTON_AVX2 __attribute__((target("avx2,fma")))

// a * b mod 2^64 in each lane, b a constant split into 32-bit halves.
PHOTON_AVX2 inline __m256i mul64(__m256i a, __m256i b_lo, __m256i b_hi) {
  const __m256i lo = _mm256_mul_epu32(a, b_lo);
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b_lo), _mm256_mul_epu32(a, b_hi));
  return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}

// SplitMix64's state before mixing for element i of the whole tensor.
inline uint64_t state_of(uint64_t seed, int64_t i) {
  const uint64_t stream = seed ^ (static_cast<uint64_t>(i >> 16) * kChunkMul);
  return stream + (static_cast<uint64_t>(i & (kChunk - 1)) + 1) * kGamma;
}

PHOTON_AVX2 void row_avx2(const DummyFill& f, int64_t r, float* out) {
  const int64_t row = f.row0 + r;
  if (row >= f.full_rows) {
    std::memset(out, 0, static_cast<size_t>(f.cols) * sizeof(float));
    return;
  }
  const __m256i c2_lo = _mm256_set1_epi64x(0x1ce4e5b9), c2_hi = _mm256_set1_epi64x(0xbf58476d);
  const __m256i c3_lo = _mm256_set1_epi64x(0x133111eb), c3_hi = _mm256_set1_epi64x(0x94d049bb);
  constexpr uint64_t kStep = 4 * kGamma;  // four draws on
  const __m256i step = _mm256_set1_epi64x(static_cast<long long>(kStep));
  const __m256i exponent = _mm256_set1_epi64x(0x4330000000000000ll);  // 2^52 as a double's bits
  const __m256d two52 = _mm256_set1_pd(0x1.0p52), two = _mm256_set1_pd(2.0), one = _mm256_set1_pd(1.0);
  const __m256d scale = _mm256_set1_pd(0x1.0p-53), half_width = _mm256_set1_pd(static_cast<double>(f.half_width));
  const __m128 mean = _mm_set1_ps(f.mean);
  const int64_t base = row * f.full_cols + f.col0;
  int64_t c = 0;
  __m256i z0 = _mm256_setzero_si256();
  for (; c + 4 <= f.cols; c += 4) {
    const int64_t i = base + c;
    // Four draws on from the last four, unless these eight indices span two chunks (or this is the first four).
    if (c > 0 && ((i - 4) >> 16) == ((i + 3) >> 16)) {
      z0 = _mm256_add_epi64(z0, step);
    } else {
      z0 = _mm256_set_epi64x(
          static_cast<long long>(state_of(f.seed, i + 3)), static_cast<long long>(state_of(f.seed, i + 2)),
          static_cast<long long>(state_of(f.seed, i + 1)), static_cast<long long>(state_of(f.seed, i)));
    }
    __m256i z = z0;
    z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), c2_lo, c2_hi);
    z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), c3_lo, c3_hi);
    z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
    // (z >> 11) as a double, exactly: 2 * (z >> 12) + bit 11, each half below 2^52.
    const __m256d high = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(z, 12), exponent)), two52);
    const __m256i bit = _mm256_and_si256(_mm256_srli_epi64(z, 11), _mm256_set1_epi64x(1));
    const __m256d low = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(bit, exponent)), two52);
    const __m256d u = _mm256_mul_pd(_mm256_add_pd(_mm256_mul_pd(high, two), low), scale);
    const __m256d t = _mm256_mul_pd(_mm256_sub_pd(_mm256_mul_pd(two, u), one), half_width);
    _mm_storeu_ps(out + c, _mm_add_ps(mean, _mm256_cvtpd_ps(t)));
  }
  for (; c < f.cols; ++c) out[c] = dummy_value(f, r, c);
}

}  // namespace

void fill_dummy(const DummyFill& f, DType dtype, void* dst) {
  const auto row_fn = active_isa() >= Isa::kAvx2 ? &row_avx2 : &row_portable;
  const size_t esize = dtype_size(dtype);
#pragma omp parallel
  {
    std::vector<float> buf(static_cast<size_t>(f.cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < f.rows; ++r) {
      float* out =
          dtype == DType::kF32 ? reinterpret_cast<float*>(static_cast<char*>(dst) + r * f.cols * esize) : buf.data();
      row_fn(f, r, out);
      if (dtype != DType::kF32) from_f32(buf.data(), f.cols, dtype, static_cast<char*>(dst) + r * f.cols * esize);
    }
  }
}

}  // namespace photon::cpu
