// CPU matmul: out = x * w^T with f32 activations and f32/f16/bf16 or group-wise int8 weights, f32 accumulation. The
// path is chosen per call from cpu::active_isa(): AMX tiles for bf16 and int8 weights and several tokens
// (matmul_amx.cpp), AVX-512 (matmul_avx512.cpp), AVX2 (matmul_avx2.cpp) or the portable loops here, which are also the
// reference the vector paths are tested against.
#include <vector>

#include "cpu/isa.hpp"
#include "cpu/kernels.hpp"
#include "cpu/matmul_paths.hpp"

namespace photon::cpu {
namespace {

void matmul_portable(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType wt, int64_t n,
                     float* out) {
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      to_f32(static_cast<const char*>(w) + static_cast<size_t>(j * k) * dtype_size(wt), wt, k, row.data());
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * ldx;
        float acc = 0.0f;
        for (int64_t kk = 0; kk < k; ++kk) acc += xi[kk] * row[static_cast<size_t>(kk)];
        out[i * n + j] = acc;
      }
    }
  }
}

void matmul_int8_portable(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* w, const float* scales,
                          int64_t group, int64_t n, float* out) {
  const int64_t groups = (k + group - 1) / group;
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t kk = 0; kk < k; ++kk) {
        row[static_cast<size_t>(kk)] = static_cast<float>(w[j * k + kk]) * scales[j * groups + kk / group];
      }
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * ldx;
        float acc = 0.0f;
        for (int64_t kk = 0; kk < k; ++kk) acc += xi[kk] * row[static_cast<size_t>(kk)];
        out[i * n + j] = acc;
      }
    }
  }
}

}  // namespace

void matmul(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType wt, int64_t n, float* out) {
  if (m == 0 || n == 0) return;
  const bool vector_dtype = wt == DType::kF32 || wt == DType::kF16 || wt == DType::kBF16;
  switch (vector_dtype ? active_isa() : Isa::kPortable) {
    case Isa::kAmx:
      if (detail::amx_matmul_supported(m, k, n, wt)) return detail::matmul_amx(x, m, k, ldx, w, n, out);
      return detail::matmul_avx512(x, m, k, ldx, w, wt, n, out);
    case Isa::kAvx512:
      return detail::matmul_avx512(x, m, k, ldx, w, wt, n, out);
    case Isa::kAvx2:
      return detail::matmul_avx2(x, m, k, ldx, w, wt, n, out);
    case Isa::kPortable:
      break;
  }
  matmul_portable(x, m, k, ldx, w, wt, n, out);
}

void matmul_int8(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* w, const float* scales, int64_t group,
                 int64_t n, float* out) {
  if (m == 0 || n == 0) return;
  switch (active_isa()) {
    case Isa::kAmx:  // bf16 tiles (AMX's int8 tiles would need int8 activations)
      if (detail::amx_int8_matmul_supported(m, k, n, group)) {
        return detail::matmul_amx_int8(x, m, k, ldx, w, scales, group, n, out);
      }
      return detail::matmul_int8_avx512(x, m, k, ldx, w, scales, group, n, out);
    case Isa::kAvx512:
      return detail::matmul_int8_avx512(x, m, k, ldx, w, scales, group, n, out);
    case Isa::kAvx2:
      return detail::matmul_int8_avx2(x, m, k, ldx, w, scales, group, n, out);
    case Isa::kPortable:
      break;
  }
  matmul_int8_portable(x, m, k, ldx, w, scales, group, n, out);
}

}  // namespace photon::cpu
