// Tensor-core W8A16 matmul for decode and small batches (2 to 16 rows of bf16 activations, group-wise int8 weights):
// out[m, n] = sum_g scale[n, g] * sum_{k in g} x[m, k] * q[n, k], f32 accumulation.
//
// The SIMT GEMV (gemv.cu) spends a multiply-add per weight and activation row on top of widening each byte; here the
// tensor cores do the multiply-adds (mma.sync m16n8k16, fp16 in, f32 out), so the work per weight is its widening
// alone and does not grow with the rows of activations:
// - the weights keep their row-major [N, K] layout. In a warp step over 64 columns of k, lane (r, t) = (lane / 4,
//   lane % 4) copies 16 bytes of weight row r of each of its tiles (8 rows each) at k + 16 t. The sum over k does not
//   care which k a fragment slot holds, as long as the activation operand uses the same assignment: mma step s
//   (0..3) gives the slots the lane owns (k16 positions 2t, 2t+1, 2t+8, 2t+9) the columns 16 t + 4 s + 0..3, so
//   both operands come from one contiguous 16-byte (weights) or 32-byte (activations) run per lane, no shuffles;
// - a byte widens exactly, two at a time, to fp16: 0x64 above the byte q + 128 is the half 1024 + q + 128, and one
//   packed subtraction gives q (a permute and a subtraction per pair, a quarter of an xor per byte). The
//   activations are converted from bf16 to fp16 once for all tiles: exact in fp16's normal range, which
//   covers what projections see; beyond +-65504 they saturate, and below 2^-14 they keep fp16's subnormal precision;
// - a 64-column step lies inside one group (groups are multiples of 64 here), so its four mma results are scaled by
//   the group's scale once, in f32, exactly as the ideal dequantized product rounds;
// - the weights go global -> shared memory with cp.async through a 4-stage ring per warp; each lane reads back only
//   what it copied, so no block barrier is needed in the loop, and three steps of weights per warp are in flight
//   without holding registers. The activations load into registers one step ahead. The first stages' weights and
//   all of the block's scales (into shared memory) load before the PDL wait (weights are constant);
// - the warps of a block split k (warp w takes steps w, w + W, ...), so each block's tiles stream with all its warps,
//   and their sums meet in shared memory. The SwiGLU form takes gate tiles and the matching up tiles of the stacked
//   [gate; up] matrix in one block and writes silu(gate) * up. The block shape (tiles, warps) follows the matrix's
//   size against the SMs (run(), below).
#include <algorithm>

#include <cuda_fp16.h>

#include "cuda/common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"

namespace photon::cuda {
namespace {

constexpr int kStep = 64;   // k columns per warp step: 4 lanes x 16 bytes
constexpr int kStages = 4;  // cp.async ring depth per warp

// The 16 int8 weights of one 16-byte load as 8 fp16 pairs (pair p holds the weights 2p and 2p + 1), exactly:
// 0x64 above the byte q + 128 is the half 1024 + q + 128, and one packed subtraction of 1152 leaves q.
__device__ __forceinline__ void widen16(const uint4& w, uint32_t (&b)[8]) {
  const uint32_t ws[4] = {w.x ^ 0x80808080u, w.y ^ 0x80808080u, w.z ^ 0x80808080u, w.w ^ 0x80808080u};
  const __half2 bias = __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480));  // 1152
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint32_t lo = __byte_perm(ws[e], 0x64646464u, 0x4140), hi = __byte_perm(ws[e], 0x64646464u, 0x4342);
    const __half2 qlo = __hsub2(*reinterpret_cast<const __half2*>(&lo), bias);
    const __half2 qhi = __hsub2(*reinterpret_cast<const __half2*>(&hi), bias);
    b[2 * e] = *reinterpret_cast<const uint32_t*>(&qlo);
    b[2 * e + 1] = *reinterpret_cast<const uint32_t*>(&qhi);
  }
}

// Two bf16 activations (one 32-bit word) as two fp16, saturating at +-65504: bf16 values in fp16's normal range
// convert exactly.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t v) {
  uint32_t d;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;\n"
      : "=r"(d)
      : "f"(__uint_as_float(v & 0xffff0000u)), "f"(__uint_as_float(v << 16)));
  return d;
}

// d = a * b + d for one m16n8k16 tile (fp16 operands, f32 accumulators).
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float bf16_round(float v) { return bf2f(f2bf(v)); }

// n rounded up to a multiple of 4 (16-byte alignment of float arrays).
__host__ __device__ constexpr int align4(int n) { return (n + 3) & ~3; }

// kTiles: 8-row weight tiles per block (for SwiGLU, kTiles / 2 gate tiles and their up tiles); kUpper: activation
// rows 8..15 are present (m > 8).
template <int kTiles, int kWarps, bool kSwiglu, bool kUpper>
__global__ void __launch_bounds__(32 * kWarps)
    w8a16_kernel(const uint16_t* __restrict__ x, int m, int64_t ldx, Int8Weights wt, int n, int k,
                 void* __restrict__ out, bool out_f32) {
  constexpr int kOutTiles = kSwiglu ? kTiles / 2 : kTiles;  // tiles of output columns
  constexpr int kRowsM = kUpper ? 16 : 8;
  __shared__ float partial[kWarps][kTiles][kRowsM][8];
  // Dynamic shared memory: the weight ring [kWarps][kStages][kTiles][32] of 16-byte slots, then the block's scales.
  extern __shared__ uint4 dynamic_smem[];
  using Ring = uint4[kStages][kTiles][32];
  Ring* ring = reinterpret_cast<Ring*>(dynamic_smem);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 4, t = lane % 4;
  const int first = blockIdx.x * kOutTiles * 8;  // first output column of the block
  const int steps = k / kStep;
  const int steps_per_group = wt.group / kStep;

  // Lane (r, t) copies row r of each tile; rows past the end repeat the last one and are not stored.
  const int8_t* wrow[kTiles];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const int col = min(first + (i % kOutTiles) * 8 + r, n - 1);
    const int64_t row = col + (kSwiglu && i >= kOutTiles ? n : 0);
    wrow[i] = wt.values + row * k + 16 * t;
  }
  // The block's scales, [tile row][group] with a padded row stride, copied to shared memory before the PDL wait:
  // no step then waits on a scale's first trip to memory. Lane (r, t) reads those of its accumulator columns 2t and
  // 2t + 1 of each tile.
  float* block_scales = reinterpret_cast<float*>(dynamic_smem + kWarps * kStages * kTiles * 32);
  const int stride = wt.groups + 1;
  for (int e = threadIdx.x; e < kTiles * 8 * wt.groups; e += 32 * kWarps) {
    const int row = e / wt.groups, g = e % wt.groups, i = row / 8;
    const int col = min(first + (i % kOutTiles) * 8 + row % 8, n - 1);
    const int64_t src = static_cast<int64_t>(col + (kSwiglu && i >= kOutTiles ? n : 0)) * wt.groups + g;
    block_scales[row * stride + g] = __ldg(wt.scales + src);
  }
  const auto load_scales = [&](int s, float(&sc)[kTiles][2]) {
    const int g = s / steps_per_group;
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) sc[i][j] = block_scales[(i * 8 + 2 * t + j) * stride + g];
  };
  // Activation rows r and r + 8 from column 16t; rows at or past m are zeros.
  const uint16_t* x_lo = x + static_cast<int64_t>(min(r, m - 1)) * ldx + 16 * t;
  const uint16_t* x_hi = x + static_cast<int64_t>(min(r + 8, m - 1)) * ldx + 16 * t;
  const bool has_lo = r < m, has_hi = kUpper && r + 8 < m;
  const auto load_x = [&](int s, uint4(&lo)[2], uint4(&hi)[2]) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    lo[0] = lo[1] = hi[0] = hi[1] = zero;
    if (has_lo) {
      lo[0] = *reinterpret_cast<const uint4*>(x_lo + s * kStep);
      lo[1] = *reinterpret_cast<const uint4*>(x_lo + s * kStep + 8);
    }
    if (has_hi) {
      hi[0] = *reinterpret_cast<const uint4*>(x_hi + s * kStep);
      hi[1] = *reinterpret_cast<const uint4*>(x_hi + s * kStep + 8);
    }
  };

  // The weights of this warp's `it`-th step (step warp + it * kWarps) into its ring slot it % kStages; one commit
  // group per step (empty past the end, so the count of groups stays uniform).
  const auto issue = [&](int it) {
    const int s = warp + it * kWarps;
    if (s < steps) {
#pragma unroll
      for (int i = 0; i < kTiles; ++i) cp_async16(&ring[warp][it % kStages][i][lane], wrow[i] + s * kStep);
    }
    cp_async_commit();
  };
  // The first stages' weights stream in while the kernel before this one finishes.
#pragma unroll
  for (int it = 0; it < kStages - 1; ++it) issue(it);
  pdl_begin();
  uint4 xl[2], xh[2];
  if (warp < steps) load_x(warp, xl, xh);
  __syncthreads();  // the block's scales are in shared memory
  float sc[kTiles][2];
  if (warp < steps) load_scales(warp, sc);

  float acc[kTiles][4];
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  for (int it = 0;; ++it) {
    const int s = warp + it * kWarps;
    if (s >= steps) break;
    issue(it + kStages - 1);
    // The next step's activations and scales load while this step computes.
    uint4 nxl[2], nxh[2];
    float nsc[kTiles][2];
    const bool more = s + kWarps < steps;
    if (more) {
      load_x(s + kWarps, nxl, nxh);
      load_scales(s + kWarps, nsc);
    }
    cp_async_wait<kStages - 1>();

    uint32_t al[8], ah[8];
    const uint32_t xlw[8] = {xl[0].x, xl[0].y, xl[0].z, xl[0].w, xl[1].x, xl[1].y, xl[1].z, xl[1].w};
    const uint32_t xhw[8] = {xh[0].x, xh[0].y, xh[0].z, xh[0].w, xh[1].x, xh[1].y, xh[1].z, xh[1].w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      al[e] = bf16x2_to_f16x2(xlw[e]);
      ah[e] = kUpper ? bf16x2_to_f16x2(xhw[e]) : 0u;
    }
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      uint32_t b[8];
      widen16(ring[warp][it % kStages][i][lane], b);
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int q = 0; q < 4; ++q)
        mma_f16(d, al[2 * q], ah[2 * q], al[2 * q + 1], ah[2 * q + 1], b[2 * q], b[2 * q + 1]);
      acc[i][0] = fmaf(d[0], sc[i][0], acc[i][0]);
      acc[i][1] = fmaf(d[1], sc[i][1], acc[i][1]);
      if constexpr (kUpper) {
        acc[i][2] = fmaf(d[2], sc[i][0], acc[i][2]);
        acc[i][3] = fmaf(d[3], sc[i][1], acc[i][3]);
      }
    }
    if (more) {
      xl[0] = nxl[0], xl[1] = nxl[1], xh[0] = nxh[0], xh[1] = nxh[1];
#pragma unroll
      for (int i = 0; i < kTiles; ++i) sc[i][0] = nsc[i][0], sc[i][1] = nsc[i][1];
    }
  }
  cp_async_wait<0>();

  // Accumulator (r, 2t + j) of tile i, and (r + 8, 2t + j) when present, to shared memory; then sum over warps.
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    partial[warp][i][r][2 * t] = acc[i][0];
    partial[warp][i][r][2 * t + 1] = acc[i][1];
    if constexpr (kUpper) {
      partial[warp][i][r + 8][2 * t] = acc[i][2];
      partial[warp][i][r + 8][2 * t + 1] = acc[i][3];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kRowsM * kOutTiles * 8; e += 32 * kWarps) {
    const int row = e / (kOutTiles * 8), c = e % (kOutTiles * 8), tile = c / 8, col = first + c;
    if (row >= m || col >= n) continue;
    float sum = 0.0f, up = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      sum += partial[w][tile][row][c % 8];
      if constexpr (kSwiglu) up += partial[w][kOutTiles + tile][row][c % 8];
    }
    const int64_t at = static_cast<int64_t>(row) * n + col;
    if constexpr (kSwiglu) {
      // As the unfused path computes it: gate and up rounded to bf16, then silu(gate) * up.
      const float gv = bf16_round(sum), uv = bf16_round(up);
      static_cast<uint16_t*>(out)[at] = f2bf(gv / (1.0f + __expf(-gv)) * uv);
    } else if (out_f32) {
      static_cast<float*>(out)[at] = sum;
    } else {
      static_cast<uint16_t*>(out)[at] = f2bf(sum);
    }
  }
}

// Dynamic shared memory of a block: the weight ring and the block's scales (padded rows).
template <int kTiles, int kWarps>
int smem_bytes(const Int8Weights& w) {
  return kWarps * kStages * kTiles * 32 * 16 + align4(kTiles * 8 * (w.groups + 1)) * 4;
}

template <int kTiles, int kWarps, bool kSwiglu>
void launch_config(const uint16_t* x, int m, int64_t ldx, const Int8Weights& w, int n, int k, void* out, bool out_f32,
                   cudaStream_t s) {
  constexpr int kOutTiles = kSwiglu ? kTiles / 2 : kTiles;
  const int blocks = (n + kOutTiles * 8 - 1) / (kOutTiles * 8);
  const int bytes = smem_bytes<kTiles, kWarps>(w);
  const auto go = [&](auto kernel) {
    // Above 48 KiB of shared memory in all needs an opt-in, per device: set it on every launch (a cheap host call).
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    launch(kernel, blocks, 32 * kWarps, static_cast<size_t>(bytes), s, x, m, ldx, w, n, k, out, out_f32);
  };
  if (m > 8) {
    go(w8a16_kernel<kTiles, kWarps, kSwiglu, true>);
  } else {
    go(w8a16_kernel<kTiles, kWarps, kSwiglu, false>);
  }
}

// Picks the block shape (8-row tiles T, warps W) from the matrix's blocks of 16 output columns per SM, as measured on
// the H200 (docs/performance.md, 2026-12-03: fourteen shapes, every projection of the 1B, 0.6B and 8B models at 1,
// 4 and 16 rows): matrices of up to ~2 such blocks per SM want many warps splitting k in each block (T = 2, W = 16)
// so that every SM streams; larger ones T = 4, W = 8; the widest (the LM head, >= 8 per SM) T = 4, W = 4. Above 8
// rows the kernel holds more registers, 16-warp blocks fit one to an SM, and T = 4, W = 8 starts at 1.5 per SM.
// SwiGLU tiles come in gate/up pairs, so T = 4 (two output tiles): W = 8 below 2 blocks per SM and, up to 8 rows, from
// 6 per SM (the 8B model's MLP, where W = 4 leaves 1.4 waves of blocks), else W = 4.
constexpr int kWideBlocksPerSm = 8;  // matrices of at least this many 16-column blocks per SM take T = 4, W = 4

template <bool kSwiglu>
void run(const uint16_t* x, int m, int64_t ldx, const Int8Weights& w, int n, int k, void* out, bool out_f32,
         cudaStream_t s) {
  const int sms = sm_count();
  const int blocks_of_two = (n + 15) / 16;  // blocks of 16 output columns
  if (blocks_of_two >= kWideBlocksPerSm * sms) return launch_config<4, 4, kSwiglu>(x, m, ldx, w, n, k, out, out_f32, s);
  if constexpr (kSwiglu) {
    const bool wide = blocks_of_two >= 2 * sms && !(m <= 8 && blocks_of_two >= 6 * sms);
    if (wide) return launch_config<4, 4, true>(x, m, ldx, w, n, k, out, out_f32, s);
    launch_config<4, 8, true>(x, m, ldx, w, n, k, out, out_f32, s);
  } else {
    const bool mid = m <= 8 ? blocks_of_two > 2 * sms : 2 * blocks_of_two > 3 * sms;
    if (mid) return launch_config<4, 8, false>(x, m, ldx, w, n, k, out, out_f32, s);
    launch_config<2, 16, false>(x, m, ldx, w, n, k, out, out_f32, s);
  }
}

}  // namespace

bool w8a16_mma_supported(int m, int k, int64_t ldx, int group) {
  return m >= 2 && m <= 16 && k % kStep == 0 && ldx % 8 == 0 && group % kStep == 0;
}

void w8a16_mma(const uint16_t* x, int m, int64_t ldx, const Int8Weights& w, int n, int k, void* out, bool out_f32,
               cudaStream_t s) {
  run<false>(x, m, ldx, w, n, k, out, out_f32, s);
}

void w8a16_mma_swiglu(const uint16_t* x, int m, int64_t ldx, const Int8Weights& w, int inter, int k, uint16_t* out,
                      cudaStream_t s) {
  run<true>(x, m, ldx, w, inter, k, out, false, s);
}

}  // namespace photon::cuda
