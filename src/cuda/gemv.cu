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
// Group-wise int8 weights (W8A16) take the same path with 16 weights per 16-byte load: each vector lies in one group
// (groups are multiples of 16), is dotted with 16 activations and scaled once by its group's scale. Widened to f32,
// a weight costs a permute, a subtraction and a multiply-add, which holds one activation row below the bandwidth; so
// one row is quantised to int16 per 16 activations instead (high and low bytes), and 16 weights are dotted in
// integers by eight dp4a (Dot, run_int8).
// Fused at decode sizes (GemvFusion), so that a layer's norms cost no launches of their own: the RMSNorm of the
// activation rows runs in the prologue (each block sums the squares of the rows, as the norm kernel's block would,
// and normalises each activation vector as it loads it), and the residual add in the epilogue.
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

// 16 int8 weights (one 16-byte load) dotted with 16 bf16 activations (two loads). Each byte becomes a float by the
// exponent trick: 0x4B000000 | (q + 128) is the float 2^23 + q + 128, so subtracting 2^23 + 128 gives q exactly.
__device__ __forceinline__ float dot16_i8(const uint4& w, const uint4& x0, const uint4& x1) {
  const uint32_t ws[4] = {w.x ^ 0x80808080u, w.y ^ 0x80808080u, w.z ^ 0x80808080u, w.w ^ 0x80808080u};
  const uint32_t xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  constexpr float kBias = 8388736.0f;  // 2^23 + 128
  float lo = 0.0f, hi = 0.0f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float q0 = __uint_as_float(__byte_perm(ws[e], 0x4B000000u, 0x7540)) - kBias;
    const float q1 = __uint_as_float(__byte_perm(ws[e], 0x4B000000u, 0x7541)) - kBias;
    const float q2 = __uint_as_float(__byte_perm(ws[e], 0x4B000000u, 0x7542)) - kBias;
    const float q3 = __uint_as_float(__byte_perm(ws[e], 0x4B000000u, 0x7543)) - kBias;
    lo += q0 * __uint_as_float(xs[2 * e] << 16) + q2 * __uint_as_float(xs[2 * e + 1] << 16);
    hi += q1 * __uint_as_float(xs[2 * e] & 0xffff0000u) + q3 * __uint_as_float(xs[2 * e + 1] & 0xffff0000u);
  }
  return lo + hi;
}

// One row of activations for the integer form of the int8 dot product: 16 activations quantised to int16 with one
// scale (max |x| / 32767, so that the error is at most max |x| / 65534, far below bf16's own rounding), split into
// the signed high bytes and the unsigned low bytes (q = 256 hi + lo).
struct Quantised16 {
  uint4 hi, lo;
};

__device__ __forceinline__ float quantise16(const uint4& x0, const uint4& x1, Quantised16& q) {
  float f0[8], f1[8], f[16];
  unpack8(x0, f0);
  unpack8(x1, f1);
  float m = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) f[e] = f0[e], f[8 + e] = f1[e];
#pragma unroll
  for (int e = 0; e < 16; ++e) m = fmaxf(m, fabsf(f[e]));
  const float inv = m > 0.0f ? 32767.0f / m : 0.0f;
  uint32_t hi[4], lo[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    int v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = __float2int_rn(f[4 * j + e] * inv);
    // Bytes 1 (high) and 0 (low) of each two's-complement value, four values to a word.
    hi[j] = __byte_perm(__byte_perm(v[0], v[1], 0x0051), __byte_perm(v[2], v[3], 0x0051), 0x5410);
    lo[j] = __byte_perm(__byte_perm(v[0], v[1], 0x0040), __byte_perm(v[2], v[3], 0x0040), 0x5410);
  }
  q.hi = make_uint4(hi[0], hi[1], hi[2], hi[3]);
  q.lo = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  return m / 32767.0f;
}

// 16 int8 weights (one 16-byte load) dotted with 16 quantised activations, exactly, in integers: four dp4a over the
// high bytes (signed x signed), four over the low bytes (signed x unsigned). |sum| < 2^31 for any 16 products.
__device__ __forceinline__ int dot16_i8_int(const uint4& w, const Quantised16& q) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w}, hs[4] = {q.hi.x, q.hi.y, q.hi.z, q.hi.w},
                 ls[4] = {q.lo.x, q.lo.y, q.lo.z, q.lo.w};
  int hi = 0, lo = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    hi = __dp4a(static_cast<int>(ws[e]), static_cast<int>(hs[e]), hi);
    asm("dp4a.s32.u32 %0, %1, %2, %0;" : "+r"(lo) : "r"(ws[e]), "r"(ls[e]));
  }
  return hi * 256 + lo;
}

__device__ __forceinline__ float bf16_round(float v) { return bf2f(f2bf(v)); }

// How a kernel forms its dot products. bf16 weights: in f32. int8 weights: widened to f32 (kInt8, 2 to 8
// activation rows) or, for one activation row, in integers (dot16_i8_int) against the row quantised per 16
// activations (quantise16): once per block into shared memory, which the block's thread groups share (kInt8Staged,
// short rows: a thread reads few vectors, so the block has many groups), or by each thread for the vectors it reads
// (kInt8Own, long rows: one or two groups a block, so little work repeats, and no barrier and no shared-memory round
// trip).
enum class Dot { kBf16, kInt8, kInt8Staged, kInt8Own };

// Where a kernel's weights are: bf16 values, or int8 values with f32 scales per group of `group` columns.
struct GemvWeights {
  const void* values;
  const float* scales;  // int8 only: [rows, groups]
  int groups;           // int8 only: scales per row
  int group_shift;      // int8 only: log2(group / 16) when the group is a power of two, else -1
  int group16;          // int8 only: group / 16 (vectors per group)
};

// How the kernel stores its sums: rounded to bf16, as f32, or rounded to bf16 and added to the bf16 already there.
enum class Store { kBf16, kF32, kAddBf16 };

// The prologue's RMSNorm of the activation rows: 1 / sqrt(mean of squares + eps) of each row, the squares summed
// in the order of the norm kernel's block of 256 threads (rms_norm.cu: thread t holds vectors t, t + 256, ... and
// the block sums the threads' partial sums as block_sum does), so that the normalised activations round exactly as
// the norm kernel stores them; the rows' block sums share two barriers. Every thread of the block calls it.
template <int M>
__device__ __forceinline__ void rows_inv_rms(const uint16_t* x, int m, int64_t ldx, int k, float eps, float (&inv)[M]) {
  __shared__ float scratch[M][32];
  float ss[M];
#pragma unroll
  for (int i = 0; i < M; ++i) {
    ss[i] = 0.0f;
    const uint16_t* row = x + min(i, m - 1) * ldx;
    for (int v = threadIdx.x; v < k / 8; v += kThreads) {
      float f[8];
      unpack8(reinterpret_cast<const uint4*>(row)[v], f);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss[i] += f[e] * f[e];
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < M; ++i) {
    ss[i] = warp_sum(ss[i]);
    if (lane == 0) scratch[i][warp] = ss[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < M; ++i) {
    const float total = warp_sum(lane < kThreads / 32 ? scratch[i][lane] : 0.0f);
    inv[i] = rsqrtf(total / static_cast<float>(k) + eps);
  }
}

// The norm weights of activations [8 * v8, 8 * v8 + kCount) (kCount = 8 or 16: one weight vector's activations).
template <int kCount>
__device__ __forceinline__ void load_norm8(const float* norm, int v8, float (&w)[kCount]) {
#pragma unroll
  for (int j = 0; j < kCount / 4; ++j) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(norm + 8 * v8) + j);
    w[4 * j] = q.x, w[4 * j + 1] = q.y, w[4 * j + 2] = q.z, w[4 * j + 3] = q.w;
  }
}

// 8 activations scaled by their row's inverse RMS and their norm weights w[0..7], rounded to bf16 (as rms_norm).
__device__ __forceinline__ uint4 normalised8(const uint4& x, const float* w, float inv) {
  float f[8];
  unpack8(x, f);
#pragma unroll
  for (int e = 0; e < 8; ++e) f[e] = w[e] * (f[e] * inv);
  return pack8(f);
}

// M: activation rows computed (x rows at or past `m` repeat the last one and are not stored); kRows: weight rows per
// group (for SwiGLU, kRows / 2 gate rows and the matching up rows); n: output columns (for SwiGLU, I); kNorm: x's
// rows are RMS-normalised with `norm` and `eps` first.
// The least blocks per SM the compiler must leave room for (0: no bound, its own register choice). A one-row bf16
// kernel with the norm prologue is held to three: without the bound the prologue's registers leave room for two,
// and the 1B model's q/k/v matrix (384 blocks of 8 rows) would run in a second wave.
template <int M, Dot kDot, bool kNorm>
constexpr int kMinBlocks = (kNorm && kDot == Dot::kBf16 && M == 1) ? 3 : 0;

// Shared memory a staged row takes per vector of 16 activations: its high and low bytes and its scale.
constexpr size_t kStagedBytesPerVec = 2 * sizeof(uint4) + sizeof(float);

template <int M, int kRows, bool kSwiglu, Dot kDot, bool kNorm>
__global__ void __launch_bounds__(kThreads, (kMinBlocks<M, kDot, kNorm>))
    gemv_kernel(const uint16_t* __restrict__ x, int m, int64_t ldx, GemvWeights wt, int n, int k, int group_threads,
                const float* __restrict__ norm, float eps, void* __restrict__ out, Store store) {
  constexpr int kOut = kSwiglu ? kRows / 2 : kRows;  // output columns per group
  constexpr bool kInt8 = kDot != Dot::kBf16;
  constexpr bool kStaged = kDot == Dot::kInt8Staged, kOwn = kDot == Dot::kInt8Own;
  static_assert(M == 1 || !(kStaged || kOwn), "the integer dot products take one activation row");
  constexpr int kPerVec = kInt8 ? 16 : 8;  // weights per 16-byte load
  __shared__ float partial[kThreads / 32][M * kRows];
  extern __shared__ Quantised16 staged[];  // kStaged: the row's k / 16 quantised vectors, then their scales
  const int groups = kThreads / group_threads;
  const int group = threadIdx.x / group_threads, tid = threadIdx.x % group_threads;
  const int first = (blockIdx.x * groups + group) * kOut;
  const int vecs = k / kPerVec;
  auto* const staged_scale = reinterpret_cast<float*>(staged + vecs);  // kStaged: the row's scales

  const uint4* rows[kRows];
  const float* row_scales[kRows];
#pragma unroll
  for (int r = 0; r < kOut; ++r) {
    const int64_t row = min(first + r, n - 1);  // rows past the end repeat the last one and are not stored
    const auto at = [&](int64_t rr) {
      return reinterpret_cast<const uint4*>(static_cast<const char*>(wt.values) + rr * k * (kInt8 ? 1 : 2));
    };
    rows[r] = at(row);
    if constexpr (kSwiglu) rows[kOut + r] = at(row + n);
    if constexpr (kInt8) {
      row_scales[r] = wt.scales + row * wt.groups;
      if constexpr (kSwiglu) row_scales[kOut + r] = wt.scales + (row + n) * wt.groups;
    }
  }
  // Activation row i (read only after the PDL wait: the kernel before may write x).
  const auto xs_at = [&](int i) { return reinterpret_cast<const uint4*>(x + min(i, m - 1) * ldx); };
  float inv_rms[kNorm ? M : 1] = {};  // kNorm: each activation row's 1 / RMS, set after the wait
  constexpr int kNormed = kNorm ? kPerVec : 1;
  // Vector v8 (8 activations) of row i, normalised with the weights nw when kNorm.
  const auto x_vec = [&](int i, int v8, const float* nw) {
    const uint4 xv = xs_at(i)[v8];
    if constexpr (kNorm) return normalised8(xv, nw, inv_rms[i]);
    return xv;
  };
  // acc += the weight vectors w[r] (vector index v of each row) dotted with every activation row: each activation
  // vector is loaded once for all rows, and an int8 row's group scale once for all activation rows. nw: the norm
  // weights of the vector's activations (kNorm).
  const auto accumulate = [&](const uint4(&w)[kRows], const float(&scale)[kRows], const float(&nw)[kNormed], int v,
                              float(&acc)[M][kRows]) {
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if constexpr (kStaged || kOwn) {
        Quantised16 q;
        float sx;
        if constexpr (kStaged) {
          q = staged[v], sx = staged_scale[v];
        } else {
          sx = quantise16(x_vec(0, 2 * v, nw), x_vec(0, 2 * v + 1, nw + (kNorm ? 8 : 0)), q);
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          acc[i][r] = fmaf(scale[r] * sx, static_cast<float>(dot16_i8_int(w[r], q)), acc[i][r]);
      } else if constexpr (kInt8) {
        const uint4 x0 = x_vec(i, 2 * v, nw), x1 = x_vec(i, 2 * v + 1, nw + (kNorm ? 8 : 0));
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[i][r] = fmaf(scale[r], dot16_i8(w[r], x0, x1), acc[i][r]);
      } else {
        const uint4 xv = x_vec(i, v, nw);
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[i][r] += dot8(w[r], xv);
      }
    }
  };
  // The group scales of vector v of each row (int8; unused for bf16).
  const auto load_scales = [&](int v, float(&scale)[kRows]) {
    if constexpr (kInt8) {
      const int g = wt.group_shift >= 0 ? v >> wt.group_shift : v / wt.group16;
#pragma unroll
      for (int r = 0; r < kRows; ++r) scale[r] = __ldg(row_scales[r] + g);
    }
  };
  const auto load_norm = [&](int v, float(&nw)[kNormed]) {
    if constexpr (kNorm) load_norm8(norm, v * (kPerVec / 8), nw);
  };
  // The weights are constant, so the first pass of loads (and its norm weights) is issued before the wait and
  // streams in while the kernel before this one finishes; for the matrices of small models (K / 8 <= T) that pass
  // is the whole row.
  uint4 first_w[kRows];
  float first_scale[kRows], first_norm[kNormed];
  const bool has_first = tid < vecs;
  if (has_first) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) first_w[r] = __ldcs(rows[r] + tid);
    load_scales(tid, first_scale);
    if constexpr (!kStaged) load_norm(tid, first_norm);
  }
  pdl_begin();
  // The thread that stores output (i, r) when adding to it reads what is there now, so that the read's latency
  // passes while the sums are made.
  const auto out_index = [&] { return static_cast<int64_t>(tid / kOut) * n + first + tid % kOut; };
  const auto stores = [&] { return tid < M * kOut && tid / kOut < m && first + tid % kOut < n; };
  float prior = 0.0f;
  if (store == Store::kAddBf16 && stores()) prior = bf2f(static_cast<const uint16_t*>(out)[out_index()]);
  if constexpr (kNorm) rows_inv_rms<M>(x, m, ldx, k, eps, inv_rms);
  if constexpr (kStaged) {
    for (int v = threadIdx.x; v < vecs; v += kThreads) {
      float nw[kNormed];
      load_norm(v, nw);
      staged_scale[v] = quantise16(x_vec(0, 2 * v, nw), x_vec(0, 2 * v + 1, nw + (kNorm ? 8 : 0)), staged[v]);
    }
    __syncthreads();
  }

  float acc[M][kRows];
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[i][r] = 0.0f;
  if (has_first) accumulate(first_w, first_scale, first_norm, tid, acc);

#pragma unroll 2
  for (int v = tid + group_threads; v < vecs; v += group_threads) {
    uint4 wv[kRows];
    float scale[kRows], nw[kNormed];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wv[r] = __ldcs(rows[r] + v);
    load_scales(v, scale);
    if constexpr (!kStaged) load_norm(v, nw);
    accumulate(wv, scale, nw, v, acc);
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
  if (!stores()) return;
  const int out_i = tid / kOut, out_r = tid % kOut;
  const int64_t out_at = out_index();
  const int warps = group_threads / 32, first_warp = group * warps;
  float sum = 0.0f, up = 0.0f;
  for (int wi = 0; wi < warps; ++wi) {
    sum += partial[first_warp + wi][out_i * kRows + out_r];
    if constexpr (kSwiglu) up += partial[first_warp + wi][out_i * kRows + kOut + out_r];
  }
  if constexpr (kSwiglu) {
    // As the unfused path computes it: gate and up rounded to bf16, then silu(gate) * up.
    const float g = bf16_round(sum), u = bf16_round(up);
    static_cast<uint16_t*>(out)[out_at] = f2bf(g / (1.0f + __expf(-g)) * u);
  } else if (store == Store::kF32) {
    static_cast<float*>(out)[out_at] = sum;
  } else if (store == Store::kAddBf16) {
    static_cast<uint16_t*>(out)[out_at] = f2bf(prior + bf16_round(sum));
  } else {
    static_cast<uint16_t*>(out)[out_at] = f2bf(sum);
  }
}

// The call's operands besides the weights.
struct GemvCall {
  const uint16_t* x;
  int m;
  int64_t ldx;
  int n, k;
  const float* norm;  // kNorm only
  float eps;
  void* out;
  Store store;
};

// Threads per group for rows of `vecs` 16-byte weight vectors: vecs rounded down to a power of two, 32..kThreads.
int threads_per_group(int vecs) {
  int threads = 32;
  while (threads < kThreads && threads * 2 <= vecs) threads *= 2;
  return threads;
}

// One int8 row of k weights is quantised by each thread for itself where the weight rows are at least this long
// (a group of kThreads threads reads a vector each per pass), else staged once per block for its several groups.
constexpr int kOwnMinK = 16 * kThreads;

// The own form's groups: 128 threads (two to a block, each thread with twice the passes) on matrices of at least
// 4,096 rows, where that streamed every Llama-3.1-8B projection 8-24% faster on the H200 (the 8B model's o 6.66 ->
// 5.14 us, down 16.94 -> 14.54; 64 threads lost again); smaller ones keep one group of 256 (the 1B model's down,
// 2,048 rows: 5.30 us, against 5.89 with 128). docs/performance.md, 2026-12-04.
constexpr int kOwnNarrowMinRows = 4096;
constexpr int kOwnNarrowThreads = 128;

// The most shared memory a staged row takes (k < kOwnMinK).
constexpr size_t kMaxStagedBytes = (kOwnMinK / 16 - 1) * kStagedBytesPerVec;

template <int M, int kRows, bool kSwiglu, Dot kDot, bool kNorm>
void launch_rows(const GemvCall& c, const GemvWeights& w, int group_threads, cudaStream_t s) {
  constexpr int kOut = kSwiglu ? kRows / 2 : kRows;
  const int per_block = kThreads / group_threads * kOut;
  const int blocks = (c.n + per_block - 1) / per_block;
  const size_t smem = kDot == Dot::kInt8Staged ? static_cast<size_t>(c.k / 16) * kStagedBytesPerVec : 0;
  launch(gemv_kernel<M, kRows, kSwiglu, kDot, kNorm>, blocks, kThreads, smem, s, c.x, c.m, c.ldx, w, c.n, c.k,
         group_threads, c.norm, c.eps, c.out, c.store);
}

// Blocks of this instantiation the GPU holds at once (all SMs; a staged row counted at its largest).
template <int M, int kRows, bool kSwiglu, Dot kDot, bool kNorm>
int resident_blocks() {
  static const int blocks = [] {
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_kernel<M, kRows, kSwiglu, kDot, kNorm>, kThreads,
                                                  kDot == Dot::kInt8Staged ? kMaxStagedBytes : 0);
    return std::max(per_sm, 1) * sm_count();
  }();
  return blocks;
}

// How a shape is launched: the threads per group (K / 8, int8 K / 16, rounded down to a power of two, 32..256; the
// own form's as kOwnNarrowThreads says) and the rows per group. A matrix that fits in one wave of resident blocks with
// some choice takes the one with the most blocks that still does (spread over every SM; every block issues its first
// loads before the PDL wait, which blocks of a second wave cannot). Larger matrices take the most rows (deepest load
// pipelines) that still give the grid at least four blocks per SM.
struct Plan {
  int group_threads;
  int rows;
  bool one_wave;
};

template <int M, bool kSwiglu, Dot kDot, bool kNorm, int... kChoices>
Plan plan(int n, int k) {
  Plan p{threads_per_group(k / (kDot == Dot::kBf16 ? 8 : 16)), 0, false};
  if (kDot == Dot::kInt8Own && n * (kSwiglu ? 2 : 1) >= kOwnNarrowMinRows) p.group_threads = kOwnNarrowThreads;
  const int groups = kThreads / p.group_threads;
  const auto blocks_for = [&](int rows) {
    const int out_rows = kSwiglu ? rows / 2 : rows;
    return (n + groups * out_rows - 1) / (groups * out_rows);
  };
  // kChoices run largest first: the last one that fits in one wave has the most blocks.
  ((blocks_for(kChoices) <= resident_blocks<M, kChoices, kSwiglu, kDot, kNorm>() ? p.rows = kChoices : 0), ...);
  p.one_wave = p.rows != 0;
  if (!p.one_wave) {
    const int want_blocks = 4 * sm_count();
    ((p.rows == 0 && (blocks_for(kChoices) >= want_blocks || kChoices == std::min({kChoices...})) ? p.rows = kChoices
                                                                                                  : 0),
     ...);
  }
  return p;
}

// An activation-row bucket: the row count M that m rows are computed as, and the rows per group its kernels are
// compiled for (largest first). One table (for_bucket) serves the plan and the launch, so they cannot disagree.
template <int M, int... kChoices>
struct Bucket {
  template <bool kSwiglu, Dot kDot, bool kNorm>
  static Plan plan_for(int n, int k) {
    return plan<M, kSwiglu, kDot, kNorm, kChoices...>(n, k);
  }
  template <bool kSwiglu, Dot kDot, bool kNorm>
  static void launch(const Plan& p, const GemvCall& c, const GemvWeights& w, cudaStream_t s) {
    ((p.rows == kChoices ? launch_rows<M, kChoices, kSwiglu, kDot, kNorm>(c, w, p.group_threads, s) : void()), ...);
  }
};

// f(Bucket<M, choices...>{}) for the bucket of m (1 to 8) activation rows; int8 weights take one row in integers
// (the integer forms' only bucket) and more rows widened to f32.
template <Dot kDot, typename F>
decltype(auto) for_bucket(int m, F&& f) {
  if constexpr (kDot == Dot::kInt8Staged || kDot == Dot::kInt8Own) {
    return f(Bucket<1, 8, 4, 2>{});
  } else {
    if constexpr (kDot == Dot::kBf16) {
      if (m == 1) return f(Bucket<1, 8, 4, 2>{});
    }
    if (m <= 2) return f(Bucket<2, 8, 4, 2>{});
    if (m <= 4) return f(Bucket<4, 4, 2>{});
    return f(Bucket<8, 2>{});
  }
}

// Plans and launches; with a norm, only where the norm may be fused (K <= 8192 and a grid of one wave, for the
// reason GemvFusion gives), and returns whether it launched.
template <bool kSwiglu, Dot kDot>
bool run(const uint16_t* x, int m, int64_t ldx, const GemvWeights& w, int n, int k, void* out, bool out_f32,
         const GemvFusion& f, cudaStream_t s) {
  const Store store = f.accumulate ? Store::kAddBf16 : (out_f32 ? Store::kF32 : Store::kBf16);
  const GemvCall c{x, m, ldx, n, k, f.norm, f.eps, out, store};
  return for_bucket<kDot>(m, [&](auto bucket) {
    using B = decltype(bucket);
    if (f.norm == nullptr) {
      B::template launch<kSwiglu, kDot, false>(B::template plan_for<kSwiglu, kDot, false>(n, k), c, w, s);
      return true;
    }
    if (k > 8192) return false;
    const Plan p = B::template plan_for<kSwiglu, kDot, true>(n, k);
    if (!p.one_wave) return false;
    B::template launch<kSwiglu, kDot, true>(p, c, w, s);
    return true;
  });
}

// run for int8 weights: one activation row in integers (staged for rows shorter than kOwnMinK, else each thread
// quantising its own vectors), more rows widened to f32. Measured on the H200 (docs/performance.md,
// 2026-12-04): the integer form streams the large matrices up to 29% faster (the 8B model's gate/up 41.2 -> 32.0 us)
// and, in the engine, wins at every size; the widened form is faster on a few small matrices run alone (the 1B
// model's o 2.47 against 2.59 us) but in decode, where their norm is fused, it lost 3% of Qwen3-0.6B's speed.
template <bool kSwiglu>
bool run_int8(const uint16_t* x, int m, int64_t ldx, const GemvWeights& w, int n, int k, void* out, bool out_f32,
              const GemvFusion& f, cudaStream_t s) {
  if (m != 1) return run<kSwiglu, Dot::kInt8>(x, m, ldx, w, n, k, out, out_f32, f, s);
  if (k >= kOwnMinK) return run<kSwiglu, Dot::kInt8Own>(x, m, ldx, w, n, k, out, out_f32, f, s);
  return run<kSwiglu, Dot::kInt8Staged>(x, m, ldx, w, n, k, out, out_f32, f, s);
}

GemvWeights int8_weights(const Int8Weights& w) {
  GemvWeights g{w.values, w.scales, w.groups, -1, w.group / 16};
  if ((g.group16 & (g.group16 - 1)) == 0) g.group_shift = __builtin_ctz(static_cast<unsigned>(g.group16));
  return g;
}

}  // namespace

bool gemv_supported(int m, int k, int64_t ldx) { return m >= 1 && m <= 8 && k % 8 == 0 && ldx % 8 == 0; }

bool gemv_int8_supported(int m, int k, int64_t ldx, int group) {
  return m >= 1 && m <= 8 && k % 16 == 0 && ldx % 8 == 0 && group % 16 == 0;
}

bool gemv(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int n, int k, void* out, bool out_f32,
          cudaStream_t s, const GemvFusion& f) {
  return run<false, Dot::kBf16>(x, m, ldx, GemvWeights{w, nullptr, 0, 0, 0}, n, k, out, out_f32, f, s);
}

bool gemv_swiglu(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int inter, int k, uint16_t* out,
                 cudaStream_t s, const GemvFusion& f) {
  return run<true, Dot::kBf16>(x, m, ldx, GemvWeights{w, nullptr, 0, 0, 0}, inter, k, out, false, f, s);
}

bool gemv_int8(const uint16_t* x, int m, int64_t ldx, const Int8Weights& w, int n, int k, void* out, bool out_f32,
               cudaStream_t s, const GemvFusion& f) {
  return run_int8<false>(x, m, ldx, int8_weights(w), n, k, out, out_f32, f, s);
}

bool gemv_swiglu_int8(const uint16_t* x, int m, int64_t ldx, const Int8Weights& w, int inter, int k, uint16_t* out,
                      cudaStream_t s, const GemvFusion& f) {
  return run_int8<true>(x, m, ldx, int8_weights(w), inter, k, out, false, f, s);
}

}  // namespace photon::cuda
