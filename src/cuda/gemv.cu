// Skinny matmul for decode (M <= 8 rows of activations): out[m, n] = sum_k x[m, k] * w[n, k], bf16 in, f32
// accumulation. Decode reads every weight byte once per step, so this kernel is a streaming read of the weights:
// - a block of 256 threads is cut into groups of T threads (T = K/8 rounded down to a power of two, 32..256); each
//   group owns kRows weight rows and strides along K with 16-byte loads, so each thread keeps kRows loads in flight
//   per pass (two passes unrolled), applies each to all M activation rows, and the group's sums meet in shared memory;
// - the first pass of weight loads is issued before the PDL wait (weights are constant), so it streams in while the
//   previous kernel finishes: for small models' matrices (K / 8 <= T) that is every load of the kernel;
// - kRows is chosen per call: small matrices take the most blocks that the GPU holds in one wave (so every block
//   issues its loads before the PDL wait), large ones the deepest load pipelines at several blocks per SM;
// - the SwiGLU form reads gate row j and up row j + I of a stacked [gate; up] matrix in the same group and writes
//   silu(gate) * up, so the gated MLP's first half is one kernel.
// Weights are read with the streaming cache hint: they are used once per step and should not evict activations.
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"

namespace photon::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float dot8(const uint4& w, const uint4& x) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w};
  float lo = 0.0f, hi = 0.0f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    lo += __uint_as_float(ws[e] << 16) * __uint_as_float(xs[e] << 16);
    hi += __uint_as_float(ws[e] & 0xffff0000u) * __uint_as_float(xs[e] & 0xffff0000u);
  }
  return lo + hi;
}

__device__ __forceinline__ float bf16_round(float v) { return bf2f(f2bf(v)); }

// M: activation rows computed (x rows at or past `m` repeat the last one and are not stored); kRows: weight rows per
// group (for SwiGLU, kRows / 2 gate rows and the matching up rows); n: output columns (for SwiGLU, I).
template <int M, int kRows, bool kSwiglu>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const uint16_t* __restrict__ x, int m, int64_t ldx, const uint16_t* __restrict__ w, int n, int k,
                int group_threads, void* __restrict__ out, bool out_f32) {
  constexpr int kOut = kSwiglu ? kRows / 2 : kRows;  // output columns per group
  __shared__ float partial[kThreads / 32][M * kRows];
  const int groups = kThreads / group_threads;
  const int group = threadIdx.x / group_threads, tid = threadIdx.x % group_threads;
  const int first = (blockIdx.x * groups + group) * kOut;
  const int vecs = k / 8;

  const uint4* rows[kRows];
#pragma unroll
  for (int r = 0; r < kOut; ++r) {
    const int64_t row = min(first + r, n - 1);  // rows past the end repeat the last one and are not stored
    rows[r] = reinterpret_cast<const uint4*>(w + row * k);
    if constexpr (kSwiglu) rows[kOut + r] = reinterpret_cast<const uint4*>(w + (row + n) * k);
  }
  // The weights are constant, so the first pass of loads is issued before the wait and streams in while the kernel
  // before this one finishes; for the matrices of small models (K / 8 <= T) that pass is the whole row.
  uint4 first_w[kRows];
  const bool has_first = tid < vecs;
  if (has_first) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) first_w[r] = __ldcs(rows[r] + tid);
  }
  pdl_begin();
  const uint4* xs[M];
#pragma unroll
  for (int i = 0; i < M; ++i) xs[i] = reinterpret_cast<const uint4*>(x + min(i, m - 1) * ldx);

  float acc[M][kRows];
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[i][r] = 0.0f;
  if (has_first) {
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const uint4 xv = xs[i][tid];
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[i][r] += dot8(first_w[r], xv);
    }
  }

#pragma unroll 2
  for (int v = tid + group_threads; v < vecs; v += group_threads) {
    uint4 wv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wv[r] = __ldcs(rows[r] + v);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const uint4 xv = xs[i][v];
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[i][r] += dot8(wv[r], xv);
    }
  }

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float s = warp_sum(acc[i][r]);
      if (lane == 0) partial[warp][i * kRows + r] = s;
    }
  __syncthreads();
  if (tid >= M * kOut) return;
  const int i = tid / kOut, r = tid % kOut, col = first + r;
  if (i >= m || col >= n) return;
  const int warps = group_threads / 32, first_warp = group * warps;
  float sum = 0.0f, up = 0.0f;
  for (int wi = 0; wi < warps; ++wi) {
    sum += partial[first_warp + wi][i * kRows + r];
    if constexpr (kSwiglu) up += partial[first_warp + wi][i * kRows + kOut + r];
  }
  const int64_t at = static_cast<int64_t>(i) * n + col;
  if constexpr (kSwiglu) {
    // As the unfused path computes it: gate and up rounded to bf16, then silu(gate) * up.
    const float g = bf16_round(sum), u = bf16_round(up);
    static_cast<uint16_t*>(out)[at] = f2bf(g / (1.0f + __expf(-g)) * u);
  } else if (out_f32) {
    static_cast<float*>(out)[at] = sum;
  } else {
    static_cast<uint16_t*>(out)[at] = f2bf(sum);
  }
}

int sm_count() {
  static const int count = [] {
    int device = 0, n = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    return n > 0 ? n : 132;
  }();
  return count;
}

template <int M, int kRows, bool kSwiglu>
void launch_rows(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int n, int k, int group_threads, void* out,
                 bool out_f32, cudaStream_t s) {
  constexpr int kOut = kSwiglu ? kRows / 2 : kRows;
  const int per_block = kThreads / group_threads * kOut;
  const int blocks = (n + per_block - 1) / per_block;
  launch(gemv_kernel<M, kRows, kSwiglu>, blocks, kThreads, 0, s, x, m, ldx, w, n, k, group_threads, out, out_f32);
}

// Blocks of this instantiation the GPU holds at once (all SMs).
template <int M, int kRows, bool kSwiglu>
int resident_blocks() {
  static const int blocks = [] {
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_kernel<M, kRows, kSwiglu>, kThreads, 0);
    return std::max(per_sm, 1) * sm_count();
  }();
  return blocks;
}

// Picks the rows per group for a shape. A matrix that fits in one wave of resident blocks with some choice takes the
// one with the most blocks that still does (spread over every SM; every block issues its first loads before the
// PDL wait, which blocks of a second wave cannot). Larger matrices take the most rows (deepest load pipelines) that
// still give the grid at least four blocks per SM.
template <int M, bool kSwiglu, int... kChoices>
void dispatch(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int n, int k, void* out, bool out_f32,
              cudaStream_t s) {
  int group_threads = 32;
  while (group_threads < kThreads && group_threads * 2 <= k / 8) group_threads *= 2;
  const int groups = kThreads / group_threads;
  const auto blocks_for = [&](int rows) {
    const int out_rows = kSwiglu ? rows / 2 : rows;
    return (n + groups * out_rows - 1) / (groups * out_rows);
  };
  // kChoices run largest first: the last one that fits in one wave has the most blocks.
  int pick = 0;
  ((blocks_for(kChoices) <= resident_blocks<M, kChoices, kSwiglu>() ? pick = kChoices : 0), ...);
  if (pick == 0) {
    const int want_blocks = 4 * sm_count();
    ((pick == 0 && (blocks_for(kChoices) >= want_blocks || kChoices == std::min({kChoices...})) ? pick = kChoices : 0),
     ...);
  }
  ((pick == kChoices ? launch_rows<M, kChoices, kSwiglu>(x, m, ldx, w, n, k, group_threads, out, out_f32, s) : void()),
   ...);
}

template <bool kSwiglu>
void run(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int n, int k, void* out, bool out_f32,
         cudaStream_t s) {
  if (m == 1) return dispatch<1, kSwiglu, 8, 4, 2>(x, m, ldx, w, n, k, out, out_f32, s);
  if (m == 2) return dispatch<2, kSwiglu, 8, 4, 2>(x, m, ldx, w, n, k, out, out_f32, s);
  if (m <= 4) return dispatch<4, kSwiglu, 4, 2>(x, m, ldx, w, n, k, out, out_f32, s);
  return dispatch<8, kSwiglu, 2>(x, m, ldx, w, n, k, out, out_f32, s);
}

}  // namespace

bool gemv_supported(int m, int k, int64_t ldx) { return m >= 1 && m <= 8 && k % 8 == 0 && ldx % 8 == 0; }

void gemv(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int n, int k, void* out, bool out_f32,
          cudaStream_t s) {
  run<false>(x, m, ldx, w, n, k, out, out_f32, s);
}

void gemv_swiglu(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int inter, int k, uint16_t* out,
                 cudaStream_t s) {
  run<true>(x, m, ldx, w, inter, k, out, false, s);
}

}  // namespace photon::cuda
