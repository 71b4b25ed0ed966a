// The AVX2 matmul path (with FMA and F16C: every x86-64 CPU since 2013 without AVX-512; cpu::active_isa() decides
// when it runs). The same scheme as the AVX-512 path (matmul_avx512.cpp) on 8-lane vectors: each weight row streams
// once per block of tokens through a register tile of MT tokens x NT weight rows, weights widened to f32 in registers
// (exact, so the products match a float32 reference), int8 weights scaled per group. The tiles are sized for AVX2's 16
// vector registers (accumulators, weight vectors and one activation vector all live in them). Columns past the last
// multiple of 8 are summed by scalar code. Every function here is compiled for AVX2 by its target attribute and
// reached only through the two entry points at the end.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "cpu/matmul_paths.hpp"

namespace photon::cpu::detail {
namespace {

#define PHOTON_AVX2 __attribute__((target("avx2,fma,f16c")))

template <int WK>
PHOTON_AVX2 inline __m256 load_w(const void* base, int64_t i) {
  if constexpr (WK == kWF32) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + i);
  } else if constexpr (WK == kWF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i)));
  } else {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  }
}

PHOTON_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// out[r, j0 + c] for r < MT, c < NT.
template <int WK, int MT, int NT>
PHOTON_AVX2 inline void tile(const float* x, int64_t ldx, const char* w, size_t w_row_bytes, int64_t k, int64_t j0,
                             float* out, int64_t ldo) {
  __m256 acc[MT][NT];
  const void* rows[NT];
  for (int c = 0; c < NT; ++c) rows[c] = w + static_cast<size_t>(j0 + c) * w_row_bytes;
  for (int r = 0; r < MT; ++r)
    for (int c = 0; c < NT; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    __m256 wv[NT];
    for (int c = 0; c < NT; ++c) wv[c] = load_w<WK>(rows[c], kk);
    for (int r = 0; r < MT; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * ldx + kk);
      for (int c = 0; c < NT; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < MT; ++r)
    for (int c = 0; c < NT; ++c) {
      float sum = hsum(acc[r][c]);
      for (int64_t t = kk; t < k; ++t) sum += x[r * ldx + t] * load_w1<WK>(rows[c], t);
      out[r * ldo + j0 + c] = sum;
    }
}

// All rows of one token block against weight rows [j_begin, j_end).
template <int WK>
PHOTON_AVX2 void rows_block(const float* x, int64_t m, int64_t ldx, const char* w, size_t w_row_bytes, int64_t k,
                            int64_t j_begin, int64_t j_end, float* out, int64_t n) {
  constexpr int kMT = 4, kNT = 2;  // 8 accumulators, 2 weight vectors, 1 activation vector
  int64_t i = 0;
  for (; i + kMT <= m; i += kMT) {
    int64_t j = j_begin;
    for (; j + kNT <= j_end; j += kNT) tile<WK, kMT, kNT>(x + i * ldx, ldx, w, w_row_bytes, k, j, out + i * n, n);
    for (; j < j_end; ++j) tile<WK, kMT, 1>(x + i * ldx, ldx, w, w_row_bytes, k, j, out + i * n, n);
  }
  for (; i < m; ++i) {
    int64_t j = j_begin;
    for (; j + 4 <= j_end; j += 4) tile<WK, 1, 4>(x + i * ldx, ldx, w, w_row_bytes, k, j, out + i * n, n);
    for (; j < j_end; ++j) tile<WK, 1, 1>(x + i * ldx, ldx, w, w_row_bytes, k, j, out + i * n, n);
  }
}

// Prompts (many tokens), as BLIS-style GEMMs do it: for each block of kPackK columns, every token's activations are
// copied into tiles of 6 tokens ([column][token]) and each thread widens the weights of its panels of 16 rows into
// f32 ([column][row], 16 KiB: stays in L1), once; every tile of 6 tokens then passes the panel in registers — per
// column two weight vectors, six broadcast activations, twelve multiply-adds (12 accumulators), where the
// dot-product tiles above need a widening and a load for every two. Both copies make the inner loop read memory
// contiguously (activation rows a power of two apart would share L1 sets). Later column blocks add to the output.
constexpr int64_t kPanel = 16, kPackK = 256, kMR = 6;
constexpr int64_t kPackTokens = 512;      // tokens whose activations are copied at once (8 MiB at k = 4096)
constexpr int64_t kPackedMinTokens = 48;  // below, widening a panel costs more than the tiles save

PHOTON_AVX2 inline void panel_tile(const float* xp, const float* packed, int64_t kb, float* out, int64_t ldo,
                                   int64_t rows, int64_t cols, bool accumulate) {
  __m256 lo[kMR], hi[kMR];
  for (int r = 0; r < kMR; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < kb; ++kk) {
    const __m256 w0 = _mm256_load_ps(packed + kk * kPanel), w1 = _mm256_load_ps(packed + kk * kPanel + 8);
    for (int r = 0; r < kMR; ++r) {
      const __m256 xv = _mm256_broadcast_ss(xp + kk * kMR + r);
      lo[r] = _mm256_fmadd_ps(xv, w0, lo[r]);
      hi[r] = _mm256_fmadd_ps(xv, w1, hi[r]);
    }
  }
  // Unrolled, so the accumulators stay registers (an indexed store loop keeps them in memory across the k loop).
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) {
    if (r >= rows) break;
    float* o = out + r * ldo;
    if (cols == kPanel) {
      if (accumulate) {
        lo[r] = _mm256_add_ps(lo[r], _mm256_loadu_ps(o));
        hi[r] = _mm256_add_ps(hi[r], _mm256_loadu_ps(o + 8));
      }
      _mm256_storeu_ps(o, lo[r]);
      _mm256_storeu_ps(o + 8, hi[r]);
    } else {
      alignas(32) float sums[kPanel];
      _mm256_store_ps(sums, lo[r]);
      _mm256_store_ps(sums + 8, hi[r]);
      for (int64_t c = 0; c < cols; ++c) o[c] = accumulate ? o[c] + sums[c] : sums[c];
    }
  }
}

// pack(j0, rows, k0, kb, packed) widens weight rows [j0, j0 + rows) x columns [k0, k0 + kb) as pack_panel does.
template <typename PackPanel>
PHOTON_AVX2 void matmul_packed(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t n, float* out,
                               const PackPanel& pack) {
  const int64_t panels = (n + kPanel - 1) / kPanel;
  const int64_t kblocks = (k + kPackK - 1) / kPackK;
  const int64_t max_tiles = ((m < kPackTokens ? m : kPackTokens) + kMR - 1) / kMR;
  std::vector<float> xp(static_cast<size_t>(max_tiles * kMR * kblocks * kPackK));
  for (int64_t i0 = 0; i0 < m; i0 += kPackTokens) {
    const int64_t mb = m - i0 < kPackTokens ? m - i0 : kPackTokens;
    const int64_t tiles = (mb + kMR - 1) / kMR;
    // Block b's tile t starts at (b * tiles + t) * 6 * kPackK.
    const auto tile_at = [&](int64_t b, int64_t t) { return xp.data() + (b * tiles + t) * kMR * kPackK; };
#pragma omp parallel
    {
      alignas(32) float packed[kPanel * kPackK];
#pragma omp for schedule(static)
      for (int64_t bt = 0; bt < kblocks * tiles; ++bt) {
        const int64_t b = bt / tiles, t = bt % tiles, k0 = b * kPackK;
        pack_tokens<kMR>(x + i0 * ldx, ldx, mb, t * kMR, k0, k - k0 < kPackK ? k - k0 : kPackK, tile_at(b, t));
      }
      // Each panel's output (mb x 16) stays in cache while its column blocks are summed into it.
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

template <int WK>
PHOTON_AVX2 void matmul_wk(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, float* out) {
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

// Int8 weights: 8 values widened to f32 (a group never splits a vector of 8: groups are multiples of 16 columns, or
// the whole row).
PHOTON_AVX2 inline __m256 widen_i8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Decode (one token): each group's products summed unscaled, then scaled once into the total; the next tile's rows
// are prefetched as the AVX-512 path does.
template <int NT>
PHOTON_AVX2 inline void row_i8(const float* x, const int8_t* w, const float* scales, int64_t group, int64_t groups,
                               int64_t k, int64_t j0, float* out) {
  __m256 acc[NT];
  float tail[NT] = {};
  for (int c = 0; c < NT; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t g = 0, g0 = 0; g0 < k; ++g, g0 += group) {
    const int64_t g_end = g0 + group < k ? g0 + group : k;
    __m256 part[NT];
    for (int c = 0; c < NT; ++c) part[c] = _mm256_setzero_ps();
    int64_t kk = g0;
    for (; kk + 8 <= g_end; kk += 8) {
      const __m256 xv = _mm256_loadu_ps(x + kk);
      if ((kk & 63) == 0) {
        for (int c = 0; c < NT; ++c)
          _mm_prefetch(reinterpret_cast<const char*>(w + (j0 + NT + c) * k + kk), _MM_HINT_T0);
      }
      for (int c = 0; c < NT; ++c) part[c] = _mm256_fmadd_ps(xv, widen_i8(w + (j0 + c) * k + kk), part[c]);
    }
    for (int c = 0; c < NT; ++c) {
      const float scale = scales[(j0 + c) * groups + g];
      acc[c] = _mm256_fmadd_ps(part[c], _mm256_set1_ps(scale), acc[c]);
      float rest = 0.0f;
      for (int64_t t = kk; t < g_end; ++t) rest += x[t] * static_cast<float>(w[(j0 + c) * k + t]);
      tail[c] += rest * scale;
    }
  }
  for (int c = 0; c < NT; ++c) out[j0 + c] = hsum(acc[c]) + tail[c];
}

// out[r, j0 + c] for r < MT, c < NT, int8 weights: the products of the dequantized weights, group by group.
template <int MT, int NT>
PHOTON_AVX2 inline void tile_i8(const float* x, int64_t ldx, const int8_t* w, const float* scales, int64_t group,
                                int64_t groups, int64_t k, int64_t j0, float* out, int64_t ldo) {
  __m256 acc[MT][NT];
  float tail[MT][NT] = {};
  for (int r = 0; r < MT; ++r)
    for (int c = 0; c < NT; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t g = 0, g0 = 0; g0 < k; ++g, g0 += group) {
    const int64_t g_end = g0 + group < k ? g0 + group : k;
    __m256 scale[NT];
    for (int c = 0; c < NT; ++c) scale[c] = _mm256_set1_ps(scales[(j0 + c) * groups + g]);
    int64_t kk = g0;
    for (; kk + 8 <= g_end; kk += 8) {
      __m256 wv[NT];
      for (int c = 0; c < NT; ++c) wv[c] = _mm256_mul_ps(widen_i8(w + (j0 + c) * k + kk), scale[c]);
      for (int r = 0; r < MT; ++r) {
        const __m256 xv = _mm256_loadu_ps(x + r * ldx + kk);
        for (int c = 0; c < NT; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
      }
    }
    for (int c = 0; c < NT; ++c) {
      const float s = scales[(j0 + c) * groups + g];
      for (int64_t t = kk; t < g_end; ++t) {
        const float wt = static_cast<float>(w[(j0 + c) * k + t]) * s;
        for (int r = 0; r < MT; ++r) tail[r][c] += x[r * ldx + t] * wt;
      }
    }
  }
  for (int r = 0; r < MT; ++r)
    for (int c = 0; c < NT; ++c) out[r * ldo + j0 + c] = hsum(acc[r][c]) + tail[r][c];
}

PHOTON_AVX2 void int8_rows(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* w, const float* scales,
                           int64_t group, int64_t n, float* out) {
  const int64_t groups = (k + group - 1) / group;
  if (m >= kPackedMinTokens) {
    return matmul_packed(x, m, k, ldx, n, out, [&](int64_t j0, int64_t rows, int64_t k0, int64_t kb, float* packed) {
      pack_panel_int8<kPanel>(w, scales, group, groups, k, j0, rows, k0, kb, packed);
    });
  }
  constexpr int64_t kRowChunk = 32;
  constexpr int kMT = 4, kNT = 2;  // 8 accumulators, 2 scales, 2 weight vectors, 1 activation vector
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
      for (; i + kMT <= mb; i += kMT) {
        int64_t j = j_begin;
        for (; j + kNT <= j_end; j += kNT)
          tile_i8<kMT, kNT>(xb + i * ldx, ldx, w, scales, group, groups, k, j, ob + i * n, n);
        for (; j < j_end; ++j) tile_i8<kMT, 1>(xb + i * ldx, ldx, w, scales, group, groups, k, j, ob + i * n, n);
      }
      for (; i < mb; ++i) {
        int64_t j = j_begin;
        for (; j + 4 <= j_end; j += 4) row_i8<4>(xb + i * ldx, w, scales, group, groups, k, j, ob + i * n);
        for (; j < j_end; ++j) row_i8<1>(xb + i * ldx, w, scales, group, groups, k, j, ob + i * n);
      }
    }
  }
}

}  // namespace

PHOTON_AVX2 void matmul_avx2(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType wt, int64_t n,
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

PHOTON_AVX2 void matmul_int8_avx2(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* w,
                                  const float* scales, int64_t group, int64_t n, float* out) {
  int8_rows(x, m, k, ldx, w, scales, group, n, out);
}

}  // namespace photon::cpu::detail
