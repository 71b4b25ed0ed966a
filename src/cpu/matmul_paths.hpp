// The vector paths of cpu::matmul and cpu::matmul_int8 (same contracts as in cpu/kernels.hpp), one file per
// instruction set; each may only be called when cpu::active_isa() is at least its set. Weights f32, f16 or bf16.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"

namespace photon::cpu::detail {

/// Tokens per outer block: keeps a block of x in L2 while the weights stream past it once.
constexpr int64_t kTokenBlock = 64;

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
