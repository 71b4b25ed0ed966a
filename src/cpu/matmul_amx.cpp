// The AMX path of cpu::matmul and cpu::matmul_int8 for several tokens (prompts and decode batches; Intel Xeons since
// Sapphire Rapids, cpu::active_isa() == kAmx). bf16 weights first; int8 weights below, widened to bf16 per call.
// TDPBF16PS multiplies a tile of 16 rows x 32 bf16 by one of 16 pairs of rows x 16 columns into 16 x 16 f32 sums: here
// the first tile is 16 weight rows read in place (row-major weights are already that layout, so nothing is packed at
// load), the second 16 tokens' activations for the same 32 columns, packed per call in pairs of columns, and the sums
// are out transposed.
//
// Activations are f32, and bf16 has 8 significant bits, so each activation is split into two bf16 parts, hi =
// bf16(x) and lo = bf16(x - hi), and every tile product runs once with each: x - hi - lo is below 2^-17 |x|, so the
// products carry about 16 bits of x (and the weights' bf16 exactly), accumulated in f32: error near 1e-5 relative,
// against 2^-24 for the AVX-512 FMA path and 2^-9 for a plain bf16 product. The second pass halves the tile rate,
// which is still ~8x the FMA path's multiply-adds per cycle.
//
// Every function here with tile or AVX-512 instructions is compiled for them by its target attribute and reached only
// through the entry points at the end. The shapes they take are amx_matmul_supported's and amx_int8_matmul_supported's;
// rows past the last multiple of 16 go to the AVX-512 path.
// GCC 12 reports false "uninitialized" warnings inside its own AVX-512 intrinsic headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.hpp"
#include "cpu/matmul_paths.hpp"

namespace photon::cpu::detail {
namespace {

#define PHOTON_AMX __attribute__((target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")))

constexpr int64_t kTile = 16;          // tile rows (weight rows, or tokens) and f32 columns
constexpr int64_t kKStep = 32;         // bf16 columns per tile row
constexpr int64_t kBlockTokens = 128;  // tokens packed at once: 8 token tiles, 4 MiB of packed pairs at k = 8192
constexpr int64_t kTileElems = kTile * kKStep;  // bf16 values in one packed activation tile (1 KiB)
// Tokens packed at once for int8 weights: every block widens each weight row again, so larger blocks pay where the
// rows are short (16,384 x 2,048, 512 tokens: 58-65 ms at 256 against 67-70 at 128; 2,048 x 8,192 level).
constexpr int64_t kInt8BlockTokens = 256;

// The tile configuration (palette 1): tiles 0-3 sums (16 x 16 f32), 4-5 weights (16 x 32 bf16), 6-7 activations
// (16 pairs of columns x 16 tokens).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

TileConfig tile_config() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  return c;
}

// Packs tokens [t0, t0 + 16) of x (rows past m are zeros) for columns [ks * 32, ks * 32 + 32) into one hi and one lo
// tile: element (r, t, p) is column ks * 32 + 2r + p of token t0 + t.
void pack_tile(const float* x, int64_t ldx, int64_t m, int64_t t0, int64_t ks, uint16_t* hi, uint16_t* lo) {
  for (int64_t t = 0; t < kTile; ++t) {
    const float* row = t0 + t < m ? x + (t0 + t) * ldx + ks * kKStep : nullptr;
    for (int64_t c = 0; c < kKStep; ++c) {
      const float v = row != nullptr ? row[c] : 0.0f;
      const uint16_t h = f32_to_bf16(v);
      const size_t at = static_cast<size_t>((c / 2) * (2 * kTile) + t * 2 + (c & 1));
      hi[at] = h;
      lo[at] = f32_to_bf16(v - bf16_to_f32(h));
    }
  }
}

// The tile state of the calling thread. Separate functions: the body of an OpenMP region is outlined without the
// target attribute of the function that holds it, so tile instructions may only appear in functions of their own.
PHOTON_AMX void tiles_begin(const TileConfig& config) { _tile_loadconfig(&config); }
PHOTON_AMX void tiles_end() { _tile_release(); }

// One weight chunk against two (NB = 2) or one token tiles: sum tiles 0-3 are [a + 2 b] for weight tile a (rows
// w0, w1 = w0 + 16 rows) and token tile b (`h0` / `l0` the first one's hi and lo parts, `tile_stride` elements to
// the next).
template <int NA, int NB>
PHOTON_AMX void zero_sums() {
  _tile_zero(0);
  if constexpr (NA == 2) _tile_zero(1);
  if constexpr (NB == 2) _tile_zero(2);
  if constexpr (NA == 2 && NB == 2) _tile_zero(3);
}

// Adds the products over tile steps [ks0, ks1) (columns 32 ks ...) of both activation parts to the sum tiles;
// weight rows are `w_stride` bytes apart.
template <int NA, int NB>
PHOTON_AMX void tile_steps(const uint16_t* w0, const uint16_t* w1, size_t w_stride, const uint16_t* h0,
                           const uint16_t* l0, int64_t tile_stride, int64_t ks0, int64_t ks1) {
  for (int64_t ks = ks0; ks < ks1; ++ks) {
    _tile_loadd(4, w0 + ks * kKStep, w_stride);
    if constexpr (NA == 2) _tile_loadd(5, w1 + ks * kKStep, w_stride);
    for (int part = 0; part < 2; ++part) {
      const uint16_t* b = (part == 0 ? h0 : l0) + ks * kTileElems;
      _tile_loadd(6, b, 64);
      if constexpr (NB == 2) _tile_loadd(7, b + tile_stride, 64);
      _tile_dpbf16ps(0, 4, 6);
      if constexpr (NA == 2) _tile_dpbf16ps(1, 5, 6);
      if constexpr (NB == 2) _tile_dpbf16ps(2, 4, 7);
      if constexpr (NA == 2 && NB == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
}

// Stores the sum tiles into sums[a + 2 b][weight row][token].
template <int NA, int NB>
PHOTON_AMX void store_sums(float (*sums)[kTile][kTile]) {
  _tile_stored(0, sums[0], 64);
  if constexpr (NA == 2) _tile_stored(1, sums[1], 64);
  if constexpr (NB == 2) _tile_stored(2, sums[2], 64);
  if constexpr (NA == 2 && NB == 2) _tile_stored(3, sums[3], 64);
}

// Writes sums (as store_sums lays them out) for token tiles [tt, tt + NB) of the block, tokens past `tokens`
// skipped, into out's columns [j0, j0 + 16 NA) transposed.
template <int NA, int NB>
void write_out(const float (*sums)[kTile][kTile], int64_t tt, int64_t tokens, int64_t j0, float* out, int64_t n) {
  for (int b = 0; b < NB; ++b) {
    for (int64_t t = 0; t < kTile; ++t) {
      const int64_t token = (tt + b) * kTile + t;
      if (token >= tokens) break;
      float* o = out + token * n + j0;
      for (int a = 0; a < NA; ++a)
        for (int64_t r = 0; r < kTile; ++r) o[a * kTile + r] = sums[a + 2 * b][r][t];
    }
  }
}

// Weight rows [j0, j0 + 16 * NA) of the bf16 weights w ([n, k], read in place) against token tiles [tt, tt + NB) of
// the packed block: the sums over all of k.
template <int NA, int NB>
PHOTON_AMX void tile_block(const uint16_t* w, int64_t k, int64_t j0, const uint16_t* hi, const uint16_t* lo, int64_t tt,
                           int64_t tokens, float* out, int64_t n) {
  const int64_t ksteps = k / kKStep, tile_stride = ksteps * kTileElems;
  const uint16_t* w0 = w + j0 * k;
  zero_sums<NA, NB>();
  tile_steps<NA, NB>(w0, w0 + kTile * k, static_cast<size_t>(k) * sizeof(uint16_t), hi + tt * tile_stride,
                     lo + tt * tile_stride, tile_stride, 0, ksteps);
  alignas(64) float sums[4][kTile][kTile];
  store_sums<NA, NB>(sums);
  write_out<NA, NB>(sums, tt, tokens, j0, out, n);
}

// ---- int8 weights ----
// The tiles' first operand is then 16 weight rows widened to bf16 per call. An int8 value needs 7 significant bits,
// so it is exact in bf16, and each group's tile products are the group's integer-weight dot products (times the
// activations' hi and lo parts); the group's scale is applied to those sums between groups, in f32, so the result is
// the dequantized weights' product with the bf16 path's precision (no weight rounding). Groups must therefore end on a
// tile step (a multiple of 32 columns, or one group for the whole row).

// Rows [j0, j0 + rows) of the int8 weights w ([n, k]), widened to bf16 into dst (row r at dst + r * k): the f32 of
// each value shifted right by 16 bits, exact for integers of up to 8 significant bits. k is a multiple of 16.
PHOTON_AMX void widen_rows(const int8_t* w, int64_t k, int64_t j0, int64_t rows, uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const int8_t* src = w + (j0 + r) * k;
    uint16_t* d = dst + r * k;
    for (int64_t c = 0; c < k; c += 16) {
      const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c)));
      const __m512i f = _mm512_castps_si512(_mm512_cvtepi32_ps(v));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + c), _mm512_cvtepi32_epi16(_mm512_srli_epi32(f, 16)));
    }
  }
}

// tile_block for int8 weights: `wb` holds the chunk's weight rows [j0, j0 + 16 * NA) widened (rows k apart), `scales`
// its first row's scales (`groups` a row); each group of `group_steps` tile steps is summed in the tiles alone, then
// added to the f32 sums times the row's scale.
template <int NA, int NB>
PHOTON_AMX void tile_block_int8(const uint16_t* wb, const float* scales, int64_t groups, int64_t group_steps, int64_t k,
                                int64_t j0, const uint16_t* hi, const uint16_t* lo, int64_t tt, int64_t tokens,
                                float* out, int64_t n) {
  const int64_t ksteps = k / kKStep, tile_stride = ksteps * kTileElems;
  alignas(64) float acc[4][kTile][kTile];   // as store_sums lays them out, over the groups done
  alignas(64) float sums[4][kTile][kTile];  // the same for the current group
  for (int64_t g = 0; g < groups; ++g) {
    zero_sums<NA, NB>();
    tile_steps<NA, NB>(wb, wb + kTile * k, static_cast<size_t>(k) * sizeof(uint16_t), hi + tt * tile_stride,
                       lo + tt * tile_stride, tile_stride, g * group_steps, std::min(ksteps, (g + 1) * group_steps));
    store_sums<NA, NB>(sums);
    for (int a = 0; a < NA; ++a) {
      for (int64_t r = 0; r < kTile; ++r) {
        const __m512 scale = _mm512_set1_ps(scales[(a * kTile + r) * groups + g]);
        for (int b = 0; b < NB; ++b) {
          const __m512 s = _mm512_load_ps(sums[a + 2 * b][r]);
          float* to = acc[a + 2 * b][r];
          _mm512_store_ps(to, g == 0 ? _mm512_mul_ps(scale, s) : _mm512_fmadd_ps(scale, s, _mm512_load_ps(to)));
        }
      }
    }
  }
  write_out<NA, NB>(acc, tt, tokens, j0, out, n);
}

// The driver of both entry points: per block of `block_tokens` tokens the threads pack the activations into hi and
// lo tiles together, then share out the weight chunks (32 rows; the last may hold 16), and `chunk(na, j0, hi, lo,
// token_tiles, tokens, block_out, scratch)` runs the chunk of rows [j0, j0 + 16 na) against every token tile of the
// block (block_out: out at the block's first token), with `scratch_elems` bf16 values of the calling thread's own.
// Rows past the last multiple of 16 are left to the caller.
template <typename Chunk>
PHOTON_AMX void run_tiles(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t n, float* out,
                          int64_t block_tokens, size_t scratch_elems, const Chunk& chunk) {
  const int64_t ksteps = k / kKStep;
  const int64_t n_tiles = n / kTile;
  const int64_t chunks = (n_tiles + 1) / 2;
  const int64_t block_tiles = (std::min(m, block_tokens) + kTile - 1) / kTile;
  std::vector<uint16_t> hi(static_cast<size_t>(block_tiles * ksteps * kTileElems));
  std::vector<uint16_t> lo(hi.size());
  const TileConfig config = tile_config();
#pragma omp parallel
  {
    std::vector<uint16_t> scratch(scratch_elems);
    tiles_begin(config);
    for (int64_t i0 = 0; i0 < m; i0 += block_tokens) {
      const int64_t tokens = std::min(block_tokens, m - i0);
      const int64_t token_tiles = (tokens + kTile - 1) / kTile;
#pragma omp for schedule(static)
      for (int64_t p = 0; p < token_tiles * ksteps; ++p) {
        const int64_t tt = p / ksteps, ks = p % ksteps;
        const size_t at = static_cast<size_t>(p * kTileElems);
        pack_tile(x + i0 * ldx, ldx, tokens, tt * kTile, ks, hi.data() + at, lo.data() + at);
      }
#pragma omp for schedule(static)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t j0 = c * 2 * kTile;
        chunk(j0 + 2 * kTile <= n_tiles * kTile ? 2 : 1, j0, hi.data(), lo.data(), token_tiles, tokens, out + i0 * n,
              scratch.data());
      }
    }
    tiles_end();
  }
}

// Runs `block.template operator()<NA, NB>(tt)` over a block's token tiles for a chunk of `na` weight tiles: pairs of
// token tiles (NB = 2), then the odd one (NB = 1).
template <typename Block>
void each_token_tile(int na, int64_t token_tiles, const Block& block) {
  int64_t tt = 0;
  for (; tt + 2 <= token_tiles; tt += 2) {
    if (na == 2) {
      block.template operator()<2, 2>(tt);
    } else {
      block.template operator()<1, 2>(tt);
    }
  }
  if (tt == token_tiles) return;
  if (na == 2) {
    block.template operator()<2, 1>(tt);
  } else {
    block.template operator()<1, 1>(tt);
  }
}

// Columns [n_main, n) of out ([m, n]) from `rest(tail)`, which writes them into tail as [m, n - n_main].
template <typename Rest>
void fill_rest(int64_t m, int64_t n, int64_t n_main, float* out, const Rest& rest) {
  if (n_main == n) return;
  const int64_t cols = n - n_main;
  std::vector<float> tail(static_cast<size_t>(m * cols));
  rest(tail.data());
  for (int64_t i = 0; i < m; ++i) {
    std::memcpy(out + i * n + n_main, tail.data() + i * cols, static_cast<size_t>(cols) * sizeof(float));
  }
}

}  // namespace

bool amx_matmul_supported(int64_t m, int64_t k, int64_t n, DType wt) {
  return wt == DType::kBF16 && m >= 2 && k % kKStep == 0 && n >= kTile;
}

bool amx_int8_matmul_supported(int64_t m, int64_t k, int64_t n, int64_t group) {
  return m >= kAmxInt8MinTokens && k % kKStep == 0 && n >= kTile && (group % kKStep == 0 || group >= k);
}

PHOTON_AMX void matmul_amx(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, float* out) {
  const auto* wb = static_cast<const uint16_t*>(w);
  run_tiles(x, m, k, ldx, n, out, kBlockTokens, 0,
            [&](int na, int64_t j0, const uint16_t* hi, const uint16_t* lo, int64_t token_tiles, int64_t tokens,
                float* block_out, uint16_t*) {
              each_token_tile(na, token_tiles, [&]<int NA, int NB>(int64_t tt) {
                tile_block<NA, NB>(wb, k, j0, hi, lo, tt, tokens, block_out, n);
              });
            });
  const int64_t n_main = n / kTile * kTile;
  fill_rest(m, n, n_main, out,
            [&](float* tail) { matmul_avx512(x, m, k, ldx, wb + n_main * k, DType::kBF16, n - n_main, tail); });
}

PHOTON_AMX void matmul_amx_int8(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* w, const float* scales,
                                int64_t group, int64_t n, float* out) {
  const int64_t groups = (k + group - 1) / group;
  const int64_t group_steps = group >= k ? k / kKStep : group / kKStep;
  // Each thread's scratch: its chunk's weight rows widened to bf16.
  run_tiles(x, m, k, ldx, n, out, kInt8BlockTokens, static_cast<size_t>(2 * kTile * k),
            [&](int na, int64_t j0, const uint16_t* hi, const uint16_t* lo, int64_t token_tiles, int64_t tokens,
                float* block_out, uint16_t* wb) {
              widen_rows(w, k, j0, na * kTile, wb);
              const float* s = scales + j0 * groups;
              each_token_tile(na, token_tiles, [&]<int NA, int NB>(int64_t tt) {
                tile_block_int8<NA, NB>(wb, s, groups, group_steps, k, j0, hi, lo, tt, tokens, block_out, n);
              });
            });
  const int64_t n_main = n / kTile * kTile;
  fill_rest(m, n, n_main, out, [&](float* tail) {
    matmul_int8_avx512(x, m, k, ldx, w + n_main * k, scales + n_main * groups, group, n - n_main, tail);
  });
}

}  // namespace photon::cpu::detail
