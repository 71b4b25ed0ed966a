// Skinny matmul for decode (M <= 8 rows of activations): out[m, n] = sum_k x[m, k] * w[n, k], bf16 in, f32
// accumulation. Decode reads every weight byte once per step, so this kernel is a streaming read of the weights:
// - a block of 256 threads is cut into groups of T threads (T = K/8 rounded down to a power of two, 32..256); each
//   group owns kRows weight rows and strides along K with 16-byte loads, so each thread keeps kRows loads in flight
//   per pass (two passes unrolled), applies each to all M activation rows, and the group's sums meet in shared memory;
// - the first pass of weight loads is issued before the PDL wait (weights are constant), so it streams in while the
//   previous kernel finishes: for small models' matrices (K / 8 <= T) that is every load of the kernel;
// - kRows is chosen per call so that the grid has several blocks per SM (small matrices) yet each thread has many
//   loads in flight (large ones);
// - the SwiGLU form reads gate row j and up row j + I of a stacked [gate; up] matrix in the same group and writes
//   silu(gate) * up, so the gated MLP's first half is one kernel;
// - the fused forms take a decoder sub-layer's boundary into the projections on either side of it (for up to
//   kMaxFusedRows activation rows): the norm form RMS-normalises its input rows into shared memory first (every
//   block redundantly; a row of a few KB read from L2), and the add form adds its output into the residual stream in
//   place (each output element has one owner). Both round exactly as rms_norm and add_rms_norm do, so the fused
//   decoder computes the same bits with two kernels fewer per layer.
// Weights are read with the streaming cache hint: they are used once per step and should not evict activations.
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/kernels.cuh"
#include "cuda/launch.cuh"
#include "cuda/row_norm.cuh"

namespace photon::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxFusedRows = 4;
constexpr int kMaxNormBytes = 32 << 10;  // the normalised rows in shared memory

// What a launch fuses around the matmul.
enum class Form { kPlain, kSwiglu, kNorm, kNormSwiglu, kAdd };
constexpr bool swiglu_form(Form f) { return f == Form::kSwiglu || f == Form::kNormSwiglu; }
constexpr bool norm_form(Form f) { return f == Form::kNorm || f == Form::kNormSwiglu; }

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

// The norm forms' prologue: rows min(M, m) of x RMS-normalised with norm_w into `normed` (shared, `vecs` 16-byte
// vectors per row), with rms_norm's arithmetic and its thread layout (thread t sums vectors t, t + kThreads, ... in
// that order, then one block_sum), so the bits are rms_norm's. w0: this thread's first norm weights, loaded before
// the PDL wait. Contains barriers.
template <int M>
__device__ __forceinline__ void normalise_rows(const uint16_t* x, int m, int64_t ldx, const float* norm_w,
                                               const float (&w0)[8], float eps, int vecs, uint4* normed) {
  __shared__ float scratch[32];
  const int rows = min(M, m);
  float ss[M];
#pragma unroll
  for (int i = 0; i < M; ++i) {
    ss[i] = 0.0f;
    if (i >= rows) continue;
    for (int v = threadIdx.x; v < vecs; v += kThreads) {
      const uint4 raw = reinterpret_cast<const uint4*>(x + i * ldx)[v];
      normed[i * vecs + v] = raw;
      float f[8];
      unpack8(raw, f);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss[i] += f[e] * f[e];
    }
  }
#pragma unroll
  for (int i = 0; i < M; ++i) {
    if (i >= rows) continue;
    const float inv = rsqrtf(block_sum(ss[i], scratch) / static_cast<float>(vecs * 8) + eps);
    for (int v = threadIdx.x; v < vecs; v += kThreads) {
      float ws[8], f[8], o[8];
      if (v == threadIdx.x) {
#pragma unroll
        for (int e = 0; e < 8; ++e) ws[e] = w0[e];
      } else {
        const float4 a = reinterpret_cast<const float4*>(norm_w)[2 * v], b = reinterpret_cast<const float4*>(norm_w)[2 * v + 1];
        ws[0] = a.x, ws[1] = a.y, ws[2] = a.z, ws[3] = a.w, ws[4] = b.x, ws[5] = b.y, ws[6] = b.z, ws[7] = b.w;
      }
      unpack8(normed[i * vecs + v], f);
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = ws[e] * (f[e] * inv);
      normed[i * vecs + v] = pack8(o);
    }
  }
  __syncthreads();
}

// M: activation rows computed (x rows at or past `m` repeat the last one and are not stored); kRows: weight rows per
// group (for SwiGLU, kRows / 2 gate rows and the matching up rows); n: output columns (for SwiGLU, I). The norm
// forms read norm_w (f32 [k]) and eps and need M * k * 2 bytes of dynamic shared memory; the add form's `out` is the
// bf16 residual [m, n].
template <int M, int kRows, Form kForm>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const uint16_t* __restrict__ x, int m, int64_t ldx, const float* __restrict__ norm_w, float eps,
                const uint16_t* __restrict__ w, int n, int k, int group_threads, void* __restrict__ out,
                bool out_f32) {
  constexpr bool kSwiglu = swiglu_form(kForm), kNorm = norm_form(kForm);
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
  float w0[8];  // the norm forms' first weights: constant, so loaded before the wait too
  if constexpr (kNorm) {
    if (static_cast<int>(threadIdx.x) < vecs) {
      const float4 a = reinterpret_cast<const float4*>(norm_w)[2 * threadIdx.x];
      const float4 b = reinterpret_cast<const float4*>(norm_w)[2 * threadIdx.x + 1];
      w0[0] = a.x, w0[1] = a.y, w0[2] = a.z, w0[3] = a.w, w0[4] = b.x, w0[5] = b.y, w0[6] = b.z, w0[7] = b.w;
    }
  }
  pdl_begin();
  // The add form's residual values, loaded now so that their latency hides behind the main loop.
  const int out_i = tid / kOut, out_r = tid % kOut, out_col = first + out_r;
  const bool stores = tid < M * kOut && out_i < m && out_col < n;
  const int64_t at = static_cast<int64_t>(out_i) * n + out_col;
  uint16_t residual = 0;
  if constexpr (kForm == Form::kAdd) {
    if (stores) residual = static_cast<const uint16_t*>(out)[at];
  }
  const uint4* xs[M];
  if constexpr (kNorm) {
    extern __shared__ uint4 normed[];
    normalise_rows<M>(x, m, ldx, norm_w, w0, eps, vecs, normed);
#pragma unroll
    for (int i = 0; i < M; ++i) xs[i] = normed + min(i, m - 1) * vecs;
  } else {
#pragma unroll
    for (int i = 0; i < M; ++i) xs[i] = reinterpret_cast<const uint4*>(x + min(i, m - 1) * ldx);
  }

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
  if (!stores) return;
  const int warps = group_threads / 32, first_warp = group * warps;
  float sum = 0.0f, up = 0.0f;
  for (int wi = 0; wi < warps; ++wi) {
    sum += partial[first_warp + wi][out_i * kRows + out_r];
    if constexpr (kSwiglu) up += partial[first_warp + wi][out_i * kRows + kOut + out_r];
  }
  if constexpr (kSwiglu) {
    // As the unfused path computes it: gate and up rounded to bf16, then silu(gate) * up.
    const float g = bf16_round(sum), u = bf16_round(up);
    static_cast<uint16_t*>(out)[at] = f2bf(g / (1.0f + __expf(-g)) * u);
  } else if constexpr (kForm == Form::kAdd) {
    // As add_rms_norm computes it: the projection rounded to bf16, added to the residual, rounded again.
    static_cast<uint16_t*>(out)[at] = f2bf(bf2f(residual) + bf16_round(sum));
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

// The arguments of one call, passed down the dispatch unchanged.
struct Call {
  const uint16_t* x;
  int m;
  int64_t ldx;
  const float* norm_w;
  float eps;
  const uint16_t* w;
  int n, k;
  void* out;
  bool out_f32;
  cudaStream_t stream;
};

template <int M, int kRows, Form kForm>
void launch_rows(const Call& c, int group_threads) {
  constexpr int kOut = swiglu_form(kForm) ? kRows / 2 : kRows;
  const int per_block = kThreads / group_threads * kOut;
  const int blocks = (c.n + per_block - 1) / per_block;
  const size_t smem = norm_form(kForm) ? static_cast<size_t>(M) * c.k * sizeof(uint16_t) : 0;
  launch(gemv_kernel<M, kRows, kForm>, blocks, kThreads, smem, c.stream, c.x, c.m, c.ldx, c.norm_w, c.eps, c.w, c.n,
         c.k, group_threads, c.out, c.out_f32);
}

// Picks the rows per group for a shape: the most (deepest load pipelines) that still gives the grid at least
// four blocks per SM, so that small matrices spread over the whole GPU.
template <int M, Form kForm, int... kChoices>
void dispatch(const Call& c) {
  int group_threads = 32;
  while (group_threads < kThreads && group_threads * 2 <= c.k / 8) group_threads *= 2;
  const int groups = kThreads / group_threads;
  const int want_blocks = 4 * sm_count();
  bool launched = false;
  const auto try_rows = [&](auto rows_constant) {
    constexpr int kRows = decltype(rows_constant)::value;
    constexpr int kOut = swiglu_form(kForm) ? kRows / 2 : kRows;
    if (launched) return;
    const int blocks = (c.n + groups * kOut - 1) / (groups * kOut);
    if (blocks >= want_blocks || kRows == std::min({kChoices...})) {
      launch_rows<M, kRows, kForm>(c, group_threads);
      launched = true;
    }
  };
  (try_rows(std::integral_constant<int, kChoices>{}), ...);  // largest first
}

template <Form kForm>
void run(const Call& c) {
  if (c.m == 1) return dispatch<1, kForm, 8, 4, 2>(c);
  if (c.m == 2) return dispatch<2, kForm, 8, 4, 2>(c);
  if (c.m <= 4) return dispatch<4, kForm, 4, 2>(c);
  if constexpr (kForm == Form::kPlain || kForm == Form::kSwiglu) dispatch<8, kForm, 2>(c);
}

}  // namespace

bool gemv_supported(int m, int k, int64_t ldx) { return m >= 1 && m <= 8 && k % 8 == 0 && ldx % 8 == 0; }

bool gemv_fusion_supported(int m, int k) {
  return m >= 1 && m <= kMaxFusedRows && k % 8 == 0 && static_cast<int64_t>(m) * k * 2 <= kMaxNormBytes;
}

void gemv(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int n, int k, void* out, bool out_f32,
          cudaStream_t s) {
  run<Form::kPlain>({x, m, ldx, nullptr, 0.0f, w, n, k, out, out_f32, s});
}

void gemv_swiglu(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int inter, int k, uint16_t* out,
                 cudaStream_t s) {
  run<Form::kSwiglu>({x, m, ldx, nullptr, 0.0f, w, inter, k, out, false, s});
}

void gemv_rms_norm(const uint16_t* x, int m, int64_t ldx, const float* norm_w, float eps, const uint16_t* w, int n,
                   int k, void* out, bool out_f32, cudaStream_t s) {
  run<Form::kNorm>({x, m, ldx, norm_w, eps, w, n, k, out, out_f32, s});
}

void gemv_rms_norm_swiglu(const uint16_t* x, int m, int64_t ldx, const float* norm_w, float eps, const uint16_t* w,
                          int inter, int k, uint16_t* out, cudaStream_t s) {
  run<Form::kNormSwiglu>({x, m, ldx, norm_w, eps, w, inter, k, out, false, s});
}

void gemv_add(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int n, int k, uint16_t* residual,
              cudaStream_t s) {
  run<Form::kAdd>({x, m, ldx, nullptr, 0.0f, w, n, k, residual, false, s});
}

}  // namespace photon::cuda
