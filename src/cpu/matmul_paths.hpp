// The vector paths of cpu::matmul and cpu::matmul_int8 (same contracts as in cpu/kernels.hpp), one file per
// instruction set; each may only be called when cpu::active_isa() is at least its set. Weights f32, f16 or bf16.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/dtype.hpp"

namespace photon::cpu::detail {

/// Tokens per outer block: keeps a block of x in L2 while the weights stream past it once.
constexpr int64_t kTokenBlock = 64;

/// The prompt GEMMs' panel of int8 weights: rows [j0, j0 + rows) x columns [k0, k0 + kb) of `w` ([n, k] values with
/// `groups` scales a row, `group` columns each) dequantized (value x its group's scale, the f32 products the
/// dot-product tiles form) into packed[kk * Panel + r], zeros in rows past `rows` (rows <= Panel).
template <int64_t Panel>
inline void pack_panel_int8(const int8_t* w, const float* scales, int64_t group, int64_t groups, int64_t k, int64_t j0,
                            int64_t rows, int64_t k0, int64_t kb, float* packed) {
  for (int64_t r = 0; r < Panel; ++r) {
    if (r >= rows) {
      for (int64_t kk = 0; kk < kb; ++kk) packed[kk * Panel + r] = 0.0f;
      continue;
    }
    const int8_t* row = w + (j0 + r) * k;
    const float* row_scales = scales + (j0 + r) * groups;
    for (int64_t c = k0; c < k0 + kb;) {  // group by group
      const int64_t g = c / group;
      const int64_t end = std::min(k0 + kb, (g + 1) * group);
      const float scale = row_scales[g];
      for (; c < end; ++c) packed[(c - k0) * Panel + r] = static_cast<float>(row[c]) * scale;
    }
  }
}

void matmul_avx512(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType wt, int64_t n, float* out);
void matmul_int8_avx512(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* w, const float* scales,
                        int64_t group, int64_t n, float* out);
/// Whether matmul_amx takes this shape: bf16 weights, at least 2 tokens, k a multiple of 32, n at least 16.
bool amx_matmul_supported(int64_t m, int64_t k, int64_t n, DType wt);
/// bf16 weights only; needs cpu::active_isa() == kAmx (which has also asked the kernel for the tile state).
void matmul_amx(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, float* out);
void matmul_avx2(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType wt, int64_t n, float* out);
void matmul_int8_avx2(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* w, const float* scales,
                      int64_t group, int64_t n, float* out);

}  // namespace photon::cpu::detail
