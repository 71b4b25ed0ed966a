// The AVX-512 matmul path (F, BW and VL; cpu::active_isa() decides when it runs). Decode is memory-bound (every
// weight byte is read once per token), so each weight row streams exactly once per block of tokens: a register tile
// of MT tokens x NT weight rows, with weights widened to f32 in registers (bf16 -> f32 is a 16-bit shift, so the
// products are exact and match a float32 reference). Int8 weights are widened and multiplied by their group's scale
// in registers (for one token, each group's sum is scaled instead). Prompts (48 tokens and more) take a BLIS-style
// GEMM over packed panels instead (matmul_packed; int8 weights dequantized into the panel). Every function here is
// compiled for AVX-512 by its target attribute and reached only through the two entry points at the end. GCC 12
// reports false "uninitialized" warnings inside its own AVX-512 intrinsic headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <vector>

#include "cpu/matmul_paths.hpp"

namespace photon::cpu::detail {
namespace {

#define PHOTON_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

template <int WK>
PHOTON_AVX512 inline __m512 load_w(const void* base, int64_t i) {
  if constexpr (WK == kWF32) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + i);
  } else if constexpr (WK == kWF16) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
  } else {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
  }
}

template <int WK>
PHOTON_AVX512 inline __m512 load_w_masked(const void* base, int64_t i, __mmask16 mask) {
  if constexpr (WK == kWF32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(base) + i);
  } else if constexpr (WK == kWF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(base) + i));
  } else {
    const __m256i v = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(base) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
  }
}

// out[r, j0 + c] for r < MT, c < NT, over columns [k0, k1): stored, or added to what is there (a later block of k).
// One token (decode) streams NT rows at once, several KiB apart, and the hardware prefetcher follows such short
// parallel streams poorly: with 16 cores sharing the memory bus, a core's demand misses alone held a decode step at
// ~80% of the read bandwidth. So with one token each 64 bytes of a row also prefetch the same bytes of the next
// tile's row into L2, a tile ahead (+17% per decode step on a 16-core Xeon). Into L2, not L1: the tile ahead (32 KiB
// and more) would evict the current one from L1, which cost 20% on a 2-core VM.
template <int WK, int MT, int NT>
PHOTON_AVX512 inline void tile(const float* x, int64_t ldx, const char* w, size_t w_row_bytes, int64_t k0, int64_t k1,
                               int64_t j0, float* out, int64_t ldo, bool accumulate) {
  constexpr int64_t kElementBytes = WK == kWF32 ? 4 : 2;
  __m512 acc[MT][NT];
  const char* rows[NT];
  for (int c = 0; c < NT; ++c) rows[c] = w + static_cast<size_t>(j0 + c) * w_row_bytes;
  for (int r = 0; r < MT; ++r)
    for (int c = 0; c < NT; ++c) acc[r][c] = _mm512_setzero_ps();
  int64_t kk = k0;
  for (; kk + 16 <= k1; kk += 16) {
    if constexpr (MT == 1) {
      if (((kk * kElementBytes) & 63) == 0) {
        for (int c = 0; c < NT; ++c) _mm_prefetch(rows[c] + NT * w_row_bytes + kk * kElementBytes, _MM_HINT_T1);
      }
    }
    __m512 wv[NT];
    for (int c = 0; c < NT; ++c) wv[c] = load_w<WK>(rows[c], kk);
    for (int r = 0; r < MT; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * ldx + kk);
      for (int c = 0; c < NT; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  if (kk < k1) {
    const auto mask = static_cast<__mmask16>((1u << (k1 - kk)) - 1u);
    __m512 wv[NT];
    for (int c = 0; c < NT; ++c) wv[c] = load_w_masked<WK>(rows[c], kk, mask);
    for (int r = 0; r < MT; ++r) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + r * ldx + kk);
      for (int c = 0; c < NT; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < MT; ++r)
    for (int c = 0; c < NT; ++c) {
      const float sum = _mm512_reduce_add_ps(acc[r][c]);
      float& o = out[r * ldo + j0 + c];
      o = accumulate ? o + sum : sum;
    }
}

// Token rows [i, i + MT) against weight rows [j_begin, j_end), NT weight rows at a time, over columns [k0, k1).
template <int WK, int MT, int NT>
PHOTON_AVX512 void sweep(const float* x, int64_t i, int64_t ldx, const char* w, size_t w_row_bytes, int64_t k0,
                         int64_t k1, int64_t j_begin, int64_t j_end, float* out, int64_t n) {
  const bool accumulate = k0 > 0;
  int64_t j = j_begin;
  for (; j + NT <= j_end; j += NT)
    tile<WK, MT, NT>(x + i * ldx, ldx, w, w_row_bytes, k0, k1, j, out + i * n, n, accumulate);
  for (; j < j_end; ++j) tile<WK, MT, 1>(x + i * ldx, ldx, w, w_row_bytes, k0, k1, j, out + i * n, n, accumulate);
}

// All rows of one token block against weight rows [j_begin, j_end). Several tokens take k in blocks of kKBlock
// columns, so that a tile's activations stay in L1 while the weight rows pass (one tile of 6 rows over all of a
// 2048-column k is 48 KiB of f32, and reading it from L2 for every 4 weight rows bounded the GEMM at ~39% of the FMA
// peak); a single token streams all of k at once (decode: the weights are read once either way). Tiles of 6 tokens x
// 4 weight rows (24 accumulators, 4 weight vectors and one activation vector of the 32 registers; each weight vector
// widened once serves 6 multiply-adds), the rest in tiles of 4, 2 and 1 token, so that no weight row is read more
// than four times per block and k block.
template <int WK>
PHOTON_AVX512 void rows_block(const float* x, int64_t m, int64_t ldx, const char* w, size_t w_row_bytes, int64_t k,
                              int64_t j_begin, int64_t j_end, float* out, int64_t n) {
  constexpr int64_t kKBlock = 512;
  const int64_t kb = m > 1 ? kKBlock : k;
  for (int64_t k0 = 0; k0 < k; k0 += kb) {
    const int64_t k1 = k0 + kb < k ? k0 + kb : k;
    int64_t i = 0;
    for (; i + 6 <= m; i += 6) sweep<WK, 6, 4>(x, i, ldx, w, w_row_bytes, k0, k1, j_begin, j_end, out, n);
    if (i + 4 <= m) {
      sweep<WK, 4, 4>(x, i, ldx, w, w_row_bytes, k0, k1, j_begin, j_end, out, n);
      i += 4;
    }
    if (i + 2 <= m) {
      sweep<WK, 2, 8>(x, i, ldx, w, w_row_bytes, k0, k1, j_begin, j_end, out, n);
      i += 2;
    }
    if (i < m) sweep<WK, 1, 8>(x, i, ldx, w, w_row_bytes, k0, k1, j_begin, j_end, out, n);
  }
}

// Prompts (many tokens), BLIS-style, as the AVX2 path does it with twice the width: for each block of kPackK columns,
// every token's activations are copied into tiles of 12 tokens ([column][token]) and each thread widens the weights
// of its panels of 32 rows into f32 ([column][row], 16 KiB: stays in L1), once; every tile of 12 tokens then passes
// the panel in registers — per column two weight vectors, twelve broadcast activations and 24 multiply-adds into 24
// accumulators, where the dot-product tiles above widen a weight vector for every six. Later column blocks add to
// the output.
constexpr int64_t kPanel = 32, kPackK = 128, kMR = 12;
constexpr int64_t kPackTokens = 516;      // tokens whose activations are copied at once (43 tiles)
constexpr int64_t kPackedMinTokens = 48;  // below, widening a panel costs more than the tiles save

PHOTON_AVX512 inline void panel_tile(const float* xp, const float* packed, int64_t kb, float* out, int64_t ldo,
                                     int64_t rows, int64_t cols, bool accumulate) {
  __m512 lo[kMR], hi[kMR];
  for (int r = 0; r < kMR; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < kb; ++kk) {
    const __m512 w0 = _mm512_load_ps(packed + kk * kPanel), w1 = _mm512_load_ps(packed + kk * kPanel + 16);
    for (int r = 0; r < kMR; ++r) {
      const __m512 xv = _mm512_set1_ps(xp[kk * kMR + r]);
      lo[r] = _mm512_fmadd_ps(xv, w0, lo[r]);
      hi[r] = _mm512_fmadd_ps(xv, w1, hi[r]);
    }
  }
  // Columns [0, 16) and [16, cols) of the panel, masked where the panel is the matrix's last and short.
  const auto mask_lo = static_cast<__mmask16>(cols >= 16 ? 0xffffu : (1u << cols) - 1u);
  const auto mask_hi = static_cast<__mmask16>(cols >= 32 ? 0xffffu : cols <= 16 ? 0u : (1u << (cols - 16)) - 1u);
  // Unrolled, so the accumulators stay registers (an indexed store loop keeps them in memory across the k loop).
#pragma GCC unroll 12
  for (int r = 0; r < kMR; ++r) {
    if (r >= rows) break;
    float* o = out + r * ldo;
    if (accumulate) {
      lo[r] = _mm512_add_ps(lo[r], _mm512_maskz_loadu_ps(mask_lo, o));
      hi[r] = _mm512_add_ps(hi[r], _mm512_maskz_loadu_ps(mask_hi, o + 16));
    }
    _mm512_mask_storeu_ps(o, mask_lo, lo[r]);
    _mm512_mask_storeu_ps(o + 16, mask_hi, hi[r]);
  }
}

// pack(j0, rows, k0, kb, packed) widens weight rows [j0, j0 + rows) x columns [k0, k0 + kb) as pack_panel does.
template <typename PackPanel>
PHOTON_AVX512 void matmul_packed(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t n, float* out,
                                 const PackPanel& pack) {
  const int64_t panels = (n + kPanel - 1) / kPanel;
  const int64_t kblocks = (k + kPackK - 1) / kPackK;
  const int64_t max_tiles = ((m < kPackTokens ? m : kPackTokens) + kMR - 1) / kMR;
  std::vector<float> xp(static_cast<size_t>(max_tiles * kMR * kblocks * kPackK));
  for (int64_t i0 = 0; i0 < m; i0 += kPackTokens) {
    const int64_t mb = m - i0 < kPackTokens ? m - i0 : kPackTokens;
    const int64_t tiles = (mb + kMR - 1) / kMR;
    // Block b's tile t starts at (b * tiles + t) * kMR * kPackK.
    const auto tile_at = [&](int64_t b, int64_t t) { return xp.data() + (b * tiles + t) * kMR * kPackK; };
#pragma omp parallel
    {
      alignas(64) float packed[kPanel * kPackK];
#pragma omp for schedule(static)
      for (int64_t bt = 0; bt < kblocks * tiles; ++bt) {
        const int64_t b = bt / tiles, t = bt % tiles, k0 = b * kPackK;
        pack_tokens<kMR>(x + i0 * ldx, ldx, mb, t * kMR, k0, k - k0 < kPackK ? k - k0 : kPackK, tile_at(b, t));
      }
      // Each panel's output (mb x 32) stays in cache while its column blocks are summed into it.
#pragma omp for schedule(static)
      for (int64_t p = 0; p < panels; ++p) {
        const int64_t j0 = p * kPanel;
        const int64_t cols = n - j0 < kPanel ? n - j0 : kPanel;
        for (int64_t b = 0; b < kblocks; ++b) {
          const int64_t k0 = b * kPackK, kb = k - k0 < kPackK ? k - k0 : kPackK;
          pack(j0, cols, k0, kb, packed);
          for (int64_t t = 0; t < tiles; ++t) {
            panel_tile(tile_at(b, t), packed, kb, out + (i0 + t * kMR) * n + j0, n, mb - t * kMR, cols, b > 0);
          }
        }
      }
    }
  }
}

// Int8 weights: 16 values widened to f32 and scaled by `scale` (a group never splits a vector of 16: groups are
// multiples of 16 columns, or the whole row).
PHOTON_AVX512 inline __m512 widen_i8(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
PHOTON_AVX512 inline __m512 widen_i8_masked(const int8_t* p, __mmask16 mask) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, p)));
}
PHOTON_AVX512 inline __m512 load_i8(const int8_t* p, __m512 scale) {
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))),
                       scale);
}
PHOTON_AVX512 inline __m512 load_i8_masked(const int8_t* p, __mmask16 mask, __m512 scale) {
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, p))), scale);
}

// Decode (one token): each group's products summed unscaled, then scaled once into the total (the sums differ from
// the dequantized weights' in rounding only). Eight rows stream at once, which the hardware prefetcher follows
// poorly at a byte per weight, so each 64 bytes of a row also prefetch the same bytes of the next tile's row.
template <int NT>
PHOTON_AVX512 inline void row_i8(const float* x, const int8_t* w, const float* scales, int64_t group, int64_t groups,
                                 int64_t k, int64_t j0, float* out) {
  __m512 acc[NT];
  for (int c = 0; c < NT; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t g = 0, g0 = 0; g0 < k; ++g, g0 += group) {
    const int64_t g_end = g0 + group < k ? g0 + group : k;
    __m512 part[NT];
    for (int c = 0; c < NT; ++c) part[c] = _mm512_setzero_ps();
    int64_t kk = g0;
    for (; kk + 16 <= g_end; kk += 16) {
      const __m512 xv = _mm512_loadu_ps(x + kk);
      if ((kk & 63) == 0) {
        for (int c = 0; c < NT; ++c)
          _mm_prefetch(reinterpret_cast<const char*>(w + (j0 + NT + c) * k + kk), _MM_HINT_T0);
      }
      for (int c = 0; c < NT; ++c) part[c] = _mm512_fmadd_ps(xv, widen_i8(w + (j0 + c) * k + kk), part[c]);
    }
    if (kk < g_end) {
      const auto mask = static_cast<__mmask16>((1u << (g_end - kk)) - 1u);
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + kk);
      for (int c = 0; c < NT; ++c) part[c] = _mm512_fmadd_ps(xv, widen_i8_masked(w + (j0 + c) * k + kk, mask), part[c]);
    }
    for (int c = 0; c < NT; ++c)
      acc[c] = _mm512_fmadd_ps(part[c], _mm512_set1_ps(scales[(j0 + c) * groups + g]), acc[c]);
  }
  for (int c = 0; c < NT; ++c) out[j0 + c] = _mm512_reduce_add_ps(acc[c]);
}

// out[r, j0 + c] for r < MT, c < NT, int8 weights: the same sums in the same order as tile<kWF32> over the
// dequantized weights, group by group.
template <int MT, int NT>
PHOTON_AVX512 inline void tile_i8(const float* x, int64_t ldx, const int8_t* w, const float* scales, int64_t group,
                                  int64_t groups, int64_t k, int64_t j0, float* out, int64_t ldo) {
  __m512 acc[MT][NT];
  for (int r = 0; r < MT; ++r)
    for (int c = 0; c < NT; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t g = 0, g0 = 0; g0 < k; ++g, g0 += group) {
    const int64_t g_end = g0 + group < k ? g0 + group : k;
    __m512 scale[NT];
    for (int c = 0; c < NT; ++c) scale[c] = _mm512_set1_ps(scales[(j0 + c) * groups + g]);
    int64_t kk = g0;
    for (; kk + 16 <= g_end; kk += 16) {
      __m512 wv[NT];
      for (int c = 0; c < NT; ++c) wv[c] = load_i8(w + (j0 + c) * k + kk, scale[c]);
      for (int r = 0; r < MT; ++r) {
        const __m512 xv = _mm512_loadu_ps(x + r * ldx + kk);
        for (int c = 0; c < NT; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
      }
    }
    if (kk < g_end) {
      const auto mask = static_cast<__mmask16>((1u << (g_end - kk)) - 1u);
      __m512 wv[NT];
      for (int c = 0; c < NT; ++c) wv[c] = load_i8_masked(w + (j0 + c) * k + kk, mask, scale[c]);
      for (int r = 0; r < MT; ++r) {
        const __m512 xv = _mm512_maskz_loadu_ps(mask, x + r * ldx + kk);
        for (int c = 0; c < NT; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
      }
    }
  }
  for (int r = 0; r < MT; ++r)
    for (int c = 0; c < NT; ++c) out[r * ldo + j0 + c] = _mm512_reduce_add_ps(acc[r][c]);
}

PHOTON_AVX512 void int8_rows(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* w, const float* scales,
                             int64_t group, int64_t n, float* out) {
  const int64_t groups = (k + group - 1) / group;
  if (m >= kPackedMinTokens) {
    return matmul_packed(x, m, k, ldx, n, out, [&](int64_t j0, int64_t rows, int64_t k0, int64_t kb, float* packed) {
      pack_panel_int8<kPanel>(w, scales, group, groups, k, j0, rows, k0, kb, packed);
    });
  }
  constexpr int64_t kRowChunk = 32;
  const int64_t chunks = (n + kRowChunk - 1) / kRowChunk;
  for (int64_t i0 = 0; i0 < m; i0 += kTokenBlock) {
    const int64_t mb = m - i0 < kTokenBlock ? m - i0 : kTokenBlock;
    const float* xb = x + i0 * ldx;
    float* ob = out + i0 * n;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t j_begin = c * kRowChunk;
      const int64_t j_end = j_begin + kRowChunk < n ? j_begin + kRowChunk : n;
      int64_t i = 0;
      for (; i + 4 <= mb; i += 4) {
        int64_t j = j_begin;
        for (; j + 4 <= j_end; j += 4) tile_i8<4, 4>(xb + i * ldx, ldx, w, scales, group, groups, k, j, ob + i * n, n);
        for (; j < j_end; ++j) tile_i8<4, 1>(xb + i * ldx, ldx, w, scales, group, groups, k, j, ob + i * n, n);
      }
      for (; i < mb; ++i) {
        int64_t j = j_begin;
        for (; j + 8 <= j_end; j += 8) row_i8<8>(xb + i * ldx, w, scales, group, groups, k, j, ob + i * n);
        for (; j < j_end; ++j) row_i8<1>(xb + i * ldx, w, scales, group, groups, k, j, ob + i * n);
      }
    }
  }
}

template <int WK>
PHOTON_AVX512 void matmul_wk(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, float* out) {
  const size_t w_row_bytes = static_cast<size_t>(k) * (WK == kWF32 ? 4 : 2);
  const auto* wb = static_cast<const char*>(w);
  if (m >= kPackedMinTokens) {
    return matmul_packed(x, m, k, ldx, n, out, [&](int64_t j0, int64_t rows, int64_t k0, int64_t kb, float* packed) {
      pack_panel<kPanel, WK>(wb, w_row_bytes, j0, rows, k0, kb, packed);
    });
  }
  // Chunks of 32 weight rows spread evenly over threads; each chunk runs every token of the block.
  constexpr int64_t kRowChunk = 32;
  const int64_t chunks = (n + kRowChunk - 1) / kRowChunk;
  for (int64_t i0 = 0; i0 < m; i0 += kTokenBlock) {
    const int64_t mb = m - i0 < kTokenBlock ? m - i0 : kTokenBlock;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t j_begin = c * kRowChunk;
      const int64_t j_end = j_begin + kRowChunk < n ? j_begin + kRowChunk : n;
      rows_block<WK>(x + i0 * ldx, mb, ldx, wb, w_row_bytes, k, j_begin, j_end, out + i0 * n, n);
    }
  }
}

}  // namespace

PHOTON_AVX512 void matmul_avx512(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType wt, int64_t n,
                                 float* out) {
  switch (wt) {
    case DType::kF32:
      return matmul_wk<kWF32>(x, m, k, ldx, w, n, out);
    case DType::kF16:
      return matmul_wk<kWF16>(x, m, k, ldx, w, n, out);
    default:
      return matmul_wk<kWBF16>(x, m, k, ldx, w, n, out);
  }
}

PHOTON_AVX512 void matmul_int8_avx512(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* w,
                                      const float* scales, int64_t group, int64_t n, float* out) {
  int8_rows(x, m, k, ldx, w, scales, group, n, out);
}

}  // namespace photon::cpu::detail
