// The vector paths of cpu::matmul and cpu::matmul_int8 (same contracts as in cpu/kernels.hpp), one file per
// instruction set; each may only be called when cpu::active_isa() is at least its set. Weights f32, f16 or bf16.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/dtype.hpp"

namespace photon::cpu::detail {

/// Tokens per outer block: keeps a block of x in L2 while the weights stream past it once.
constexpr int64_t kTokenBlock = 64;

/// How a float weight matrix stores its values (the WK parameter of the paths' templates).
enum WeightKind { kWF32, kWF16, kWBF16 };

/// Weight i of `base` (stored as WK) as f32, for the columns past the last vector. Compiled for AVX2 and F16C, so
/// only the AVX2 and AVX-512 paths may call it.
template <int WK>
__attribute__((target("avx2,f16c"))) inline float load_w1(const void* base, int64_t i) {
  if constexpr (WK == kWF32) {
    return static_cast<const float*>(base)[i];
  } else if constexpr (WK == kWF16) {
    return _cvtsh_ss(static_cast<const uint16_t*>(base)[i]);
  } else {
    const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(base)[i]) << 16;
    float f = 0.0f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
}

/// 16 rows x 16 columns of int8 values (row r at src + r * stride) transposed in registers: byte r of out[c] is row
/// r's column c. SSE2 only, so every vector path can inline it.
inline void transpose_16x16_i8(const int8_t* src, int64_t stride, __m128i out[16]) {
  __m128i a[16];
  for (int64_t r = 0; r < 16; ++r) a[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + r * stride));
  // Each stage doubles the rows a lane holds: pairs[p][h]'s 16-bit lane j is column 8h + j of rows 2p, 2p + 1;
  // quads[q][t]'s 32-bit lane j is column 4t + j of rows 4q..4q + 3; octs[s][e]'s 64-bit lane j is column 2e + j of
  // rows 8s..8s + 7.
  __m128i pairs[8][2], quads[4][4], octs[2][8];
  for (int64_t p = 0; p < 8; ++p) {
    pairs[p][0] = _mm_unpacklo_epi8(a[2 * p], a[2 * p + 1]);
    pairs[p][1] = _mm_unpackhi_epi8(a[2 * p], a[2 * p + 1]);
  }
  for (int64_t q = 0; q < 4; ++q)
    for (int64_t h = 0; h < 2; ++h) {
      quads[q][2 * h] = _mm_unpacklo_epi16(pairs[2 * q][h], pairs[2 * q + 1][h]);
      quads[q][2 * h + 1] = _mm_unpackhi_epi16(pairs[2 * q][h], pairs[2 * q + 1][h]);
    }
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t t = 0; t < 4; ++t) {
      octs[o][2 * t] = _mm_unpacklo_epi32(quads[2 * o][t], quads[2 * o + 1][t]);
      octs[o][2 * t + 1] = _mm_unpackhi_epi32(quads[2 * o][t], quads[2 * o + 1][t]);
    }
  for (int64_t e = 0; e < 8; ++e) {
    out[2 * e] = _mm_unpacklo_epi64(octs[0][e], octs[1][e]);
    out[2 * e + 1] = _mm_unpackhi_epi64(octs[0][e], octs[1][e]);
  }
}

/// 8 rows x 8 columns of 16-bit values (row r at src + r * stride elements) transposed in registers: 16-bit lane r
/// of out[c] is row r's column c. SSE2 only, as transpose_16x16_i8.
inline void transpose_8x8_u16(const uint16_t* src, int64_t stride, __m128i out[8]) {
  __m128i a[8];
  for (int64_t r = 0; r < 8; ++r) a[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + r * stride));
  // pairs[p][h]'s 32-bit lane j is column 4h + j of rows 2p, 2p + 1; quads[q][t]'s 64-bit lane j is column 2t + j of
  // rows 4q..4q + 3.
  __m128i pairs[4][2], quads[2][4];
  for (int64_t p = 0; p < 4; ++p) {
    pairs[p][0] = _mm_unpacklo_epi16(a[2 * p], a[2 * p + 1]);
    pairs[p][1] = _mm_unpackhi_epi16(a[2 * p], a[2 * p + 1]);
  }
  for (int64_t q = 0; q < 2; ++q)
    for (int64_t h = 0; h < 2; ++h) {
      quads[q][2 * h] = _mm_unpacklo_epi32(pairs[2 * q][h], pairs[2 * q + 1][h]);
      quads[q][2 * h + 1] = _mm_unpackhi_epi32(pairs[2 * q][h], pairs[2 * q + 1][h]);
    }
  for (int64_t t = 0; t < 4; ++t) {
    out[2 * t] = _mm_unpacklo_epi64(quads[0][t], quads[1][t]);
    out[2 * t + 1] = _mm_unpackhi_epi64(quads[0][t], quads[1][t]);
  }
}

/// The prompt GEMMs' panel of 16-bit weights (bf16, or f16 when F16): rows [j0, j0 + Panel) x columns [k0, k0 +
/// cols) of rows w_row_bytes apart, widened to f32 into packed[kk * Panel + r], 8 rows x 8 columns at a time through
/// transpose_8x8_u16 (a scalar loop's stores a panel row apart took ~40% of a 48-token GEMM). cols is a multiple of 8;
/// packed is 32-byte aligned. Compiled for AVX2 and F16C, so only the AVX2 and AVX-512 paths may call it.
template <int64_t Panel, bool F16>
__attribute__((target("avx2,f16c"))) inline void pack_panel_16bit(const char* w, size_t w_row_bytes, int64_t j0,
                                                                  int64_t k0, int64_t cols, float* packed) {
  static_assert(Panel % 8 == 0);
  for (int64_t r0 = 0; r0 < Panel; r0 += 8) {
    const auto* base = reinterpret_cast<const uint16_t*>(w + static_cast<size_t>(j0 + r0) * w_row_bytes) + k0;
    for (int64_t c = 0; c < cols; c += 8) {
      __m128i col[8];
      transpose_8x8_u16(base + c, static_cast<int64_t>(w_row_bytes / 2), col);
      for (int64_t cc = 0; cc < 8; ++cc) {
        const __m256 v =
            F16 ? _mm256_cvtph_ps(col[cc]) : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(col[cc]), 16));
        _mm256_store_ps(packed + (c + cc) * Panel + r0, v);
      }
    }
  }
}

/// The prompt GEMMs' panel of float weights (stored as WK): rows [j0, j0 + rows) x columns [k0, k0 + kb) of rows
/// w_row_bytes apart, widened to f32 into packed[kk * Panel + r], zeros in rows past `rows` (rows <= Panel). Whole
/// panels of bf16 and f16 weights go through pack_panel_16bit's transposes; f32 weights, a partial panel and the last
/// columns one value at a time. packed is 32-byte aligned. Compiled for AVX2 and F16C, as pack_panel_16bit.
template <int64_t Panel, int WK>
__attribute__((target("avx2,f16c"))) inline void pack_panel(const char* w, size_t w_row_bytes, int64_t j0, int64_t rows,
                                                            int64_t k0, int64_t kb, float* packed) {
  int64_t done = 0;  // columns [0, done) packed by the transposes
  if constexpr (WK == kWBF16 || WK == kWF16) {
    if (rows == Panel) {
      done = kb / 8 * 8;
      pack_panel_16bit<Panel, WK == kWF16>(w, w_row_bytes, j0, k0, done, packed);
    }
  }
  for (int64_t r = 0; r < Panel; ++r) {
    if (r >= rows) {
      for (int64_t kk = 0; kk < kb; ++kk) packed[kk * Panel + r] = 0.0f;
      continue;
    }
    const void* row = w + static_cast<size_t>(j0 + r) * w_row_bytes;
    for (int64_t kk = done; kk < kb; ++kk) packed[kk * Panel + r] = load_w1<WK>(row, k0 + kk);
  }
}

/// The prompt GEMMs' tile of activations: tokens [t0, t0 + MR) of x (rows ldx apart; zeros past m), columns [k0, k0 +
/// kb), into xp[kk * MR + r]. Compiled for AVX2, as the paths that call it.
template <int64_t MR>
__attribute__((target("avx2"))) inline void pack_tokens(const float* x, int64_t ldx, int64_t m, int64_t t0, int64_t k0,
                                                        int64_t kb, float* xp) {
  for (int64_t r = 0; r < MR; ++r) {
    const float* row = x + (t0 + r) * ldx + k0;
    for (int64_t kk = 0; kk < kb; ++kk) xp[kk * MR + r] = t0 + r < m ? row[kk] : 0.0f;
  }
}

/// The prompt GEMMs' panel of int8 weights, one value at a time: rows [j0, j0 + rows) x columns [k0, k0 + kb) of `w`
/// ([n, k] values with `groups` scales a row, `group` columns each) dequantized (value x its group's scale, the f32
/// products the dot-product tiles form) into packed[kk * Panel + r], zeros in rows past `rows` (rows <= Panel).
template <int64_t Panel>
inline void pack_panel_int8_scalar(const int8_t* w, const float* scales, int64_t group, int64_t groups, int64_t k,
                                   int64_t j0, int64_t rows, int64_t k0, int64_t kb, float* packed) {
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

/// pack_panel_int8_scalar's panel, whole panels 16 rows x 16 columns at a time through transpose_16x16_i8 (a scalar
/// loop's stores a panel row apart took ~40% of a 48-token GEMM) where every 16 columns lie in one group (groups of a
/// multiple of 16, or the whole row); partial panels and the last columns one value at a time. packed is 32-byte
/// aligned. Compiled for AVX2, so only the AVX2 and AVX-512 paths may call it.
template <int64_t Panel>
__attribute__((target("avx2"))) inline void pack_panel_int8(const int8_t* w, const float* scales, int64_t group,
                                                            int64_t groups, int64_t k, int64_t j0, int64_t rows,
                                                            int64_t k0, int64_t kb, float* packed) {
  static_assert(Panel % 16 == 0);
  const bool blocks = rows == Panel && (group % 16 == 0 || group >= k);
  const int64_t done = blocks ? kb / 16 * 16 : 0;  // columns [0, done) packed by the transposes
  for (int64_t r0 = 0; r0 < Panel && done > 0; r0 += 16) {
    for (int64_t c = 0; c < done; c += 16) {
      const int64_t g = (k0 + c) / group;
      alignas(32) float s[16];
      for (int64_t r = 0; r < 16; ++r) s[r] = scales[(j0 + r0 + r) * groups + g];
      const __m256 scale_lo = _mm256_load_ps(s), scale_hi = _mm256_load_ps(s + 8);
      __m128i cols[16];
      transpose_16x16_i8(w + (j0 + r0) * k + k0 + c, k, cols);
      for (int64_t cc = 0; cc < 16; ++cc) {
        float* dst = packed + (c + cc) * Panel + r0;
        _mm256_store_ps(dst, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(cols[cc])), scale_lo));
        _mm256_store_ps(dst + 8,
                        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(cols[cc], 8))), scale_hi));
      }
    }
  }
  if (done < kb)
    pack_panel_int8_scalar<Panel>(w, scales, group, groups, k, j0, rows, k0 + done, kb - done, packed + done * Panel);
}

void matmul_avx512(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType wt, int64_t n, float* out);
void matmul_int8_avx512(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* w, const float* scales,
                        int64_t group, int64_t n, float* out);
/// Whether matmul_amx takes this shape: bf16 weights, at least 2 tokens, k a multiple of 32, n at least 16.
bool amx_matmul_supported(int64_t m, int64_t k, int64_t n, DType wt);
/// bf16 weights only; needs cpu::active_isa() == kAmx (which has also asked the kernel for the tile state).
void matmul_amx(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, float* out);
/// Fewest tokens for which matmul_amx_int8 is at least level with the AVX-512 int8 path: below, its per-call widening
/// of the weights costs more than the tiles save. 8192 x 2048, groups of 128, weights in cache, 2-core Sapphire
/// Rapids-class VM (ms, AMX vs AVX-512): 2 tokens 1.71-1.78 vs 0.72, 4: 1.73-1.81 vs 0.81, 8: 1.56-1.78 vs 1.57-1.73,
/// 12: 1.58-1.65 vs 2.48-2.59, 16: 1.62-1.82 vs 2.95-3.41.
constexpr int64_t kAmxInt8MinTokens = 8;
/// Whether matmul_amx_int8 takes this shape: at least kAmxInt8MinTokens tokens, k a multiple of 32, n at least 16,
/// groups ending on 32-column tile steps (group a multiple of 32, or group >= k).
bool amx_int8_matmul_supported(int64_t m, int64_t k, int64_t n, int64_t group);
/// matmul_int8 on AMX tiles: each group's integer weights (exact in bf16) against the activations' bf16 hi and lo
/// parts, the group's scale applied to its sums in f32. Needs cpu::active_isa() == kAmx.
void matmul_amx_int8(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* w, const float* scales,
                     int64_t group, int64_t n, float* out);
void matmul_avx2(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType wt, int64_t n, float* out);
void matmul_int8_avx2(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* w, const float* scales,
                      int64_t group, int64_t n, float* out);

}  // namespace photon::cpu::detail
