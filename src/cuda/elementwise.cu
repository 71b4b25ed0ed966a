// Embedding lookup, RMSNorm (plain and fused with the residual add), SwiGLU and row gathers.
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/kernels.cuh"
#include "cuda/launch.cuh"
#include "cuda/row_norm.cuh"

namespace photon::cuda {
namespace {

__global__ void embed_kernel(const int32_t* ids, const int32_t* sampled, const uint16_t* table, int rows, int hidden,
                             int first_id, uint16_t* out) {
  pdl_begin();
  const int t = blockIdx.x;
  const int id = ids[t];
  const int r = (id >= 0 ? id : sampled[-id - 1]) - first_id;
  uint16_t* dst = out + static_cast<int64_t>(t) * hidden;
  if (r < 0 || r >= rows) {  // another rank's slice of the vocabulary
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = 0;
    return;
  }
  const uint16_t* row = table + static_cast<int64_t>(r) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = row[i];
}

// Rows whose length is a multiple of 8 (every model's hidden size) take the vector kernel: each thread keeps up to
// kMaxVecs 16-byte vectors of its row in registers, issues the loads of x, the residual and the weight together, and
// writes once. Other lengths take the scalar kernels.
constexpr int kNormThreads = 256;
constexpr int kMaxVecs = 4;  // rows up to 256 * 8 * 4 = 8192

// kAdd: residual = bf16(residual + x) first (as transformers adds in bf16), then the norm of the residual.
template <bool kAdd>
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_vec_kernel(uint16_t* residual, const uint16_t* x, const float* w, int dim, float eps, uint16_t* out) {
  __shared__ float scratch[32];
  const int vecs = dim / 8;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float ws[kMaxVecs][8];
  load_norm_weights<kMaxVecs, kNormThreads>(w, vecs, ws);  // before the wait: they are constant
  pdl_begin();
  float v[kMaxVecs][8];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    const int i = threadIdx.x + j * kNormThreads;
    if (i >= vecs) break;
    unpack8(reinterpret_cast<const uint4*>(x + base)[i], v[j]);
    if constexpr (kAdd) {
      float r[8];
      unpack8(reinterpret_cast<const uint4*>(residual + base)[i], r);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[j][e] = bf2f(f2bf(r[e] + v[j][e]));
      reinterpret_cast<uint4*>(residual + base)[i] = pack8(v[j]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[j][e] * v[j][e];
  }
  write_rms_norm<kMaxVecs, kNormThreads>(v, ws, ss, vecs, dim, eps, reinterpret_cast<uint4*>(out + base), scratch);
}

bool vector_norm(int dim) { return dim % 8 == 0 && dim <= kNormThreads * 8 * kMaxVecs; }

__global__ void rms_norm_kernel(const uint16_t* x, const float* w, int dim, float eps, uint16_t* out) {
  pdl_begin();
  __shared__ float scratch[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = bf2f(x[base + i]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[base + i] = f2bf(w[i] * (bf2f(x[base + i]) * inv));
}

__global__ void add_rms_norm_kernel(uint16_t* residual, const uint16_t* x, const float* w, int dim, float eps,
                                    uint16_t* out) {
  pdl_begin();
  __shared__ float scratch[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const uint16_t r = f2bf(bf2f(residual[base + i]) + bf2f(x[base + i]));
    residual[base + i] = r;
    const float v = bf2f(r);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[base + i] = f2bf(w[i] * (bf2f(residual[base + i]) * inv));
}

// out[r, j] = silu(gate_up[r, j]) * gate_up[r, inter + j], eight columns per thread (inter % 8 == 0) or one.
template <int kVec>
__global__ void swiglu_kernel(const uint16_t* gate_up, int64_t rows, int inter, uint16_t* out) {
  pdl_begin();
  const int cols = inter / kVec;
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = (i % cols) * kVec;
    const uint16_t* g = gate_up + r * 2 * inter + c;
    if constexpr (kVec == 8) {
      float gv[8], uv[8], o[8];
      unpack8(*reinterpret_cast<const uint4*>(g), gv);
      unpack8(*reinterpret_cast<const uint4*>(g + inter), uv);
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = gv[e] / (1.0f + __expf(-gv[e])) * uv[e];
      *reinterpret_cast<uint4*>(out + r * inter + c) = pack8(o);
    } else {
      const float gv = bf2f(g[0]);
      out[r * inter + c] = f2bf(gv / (1.0f + __expf(-gv)) * bf2f(g[inter]));
    }
  }
}

__global__ void gather_rows_kernel(const uint16_t* x, const int32_t* indices, int dim, uint16_t* out) {
  pdl_begin();
  const uint16_t* src = x + static_cast<int64_t>(indices[blockIdx.x]) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[static_cast<int64_t>(blockIdx.x) * dim + i] = src[i];
}

int threads_for(int dim) { return dim >= 1024 ? 256 : (dim >= 256 ? 128 : 64); }

}  // namespace

void embed(const int32_t* ids, const int32_t* sampled, int num_tokens, const uint16_t* table, int rows, int hidden,
           int first_id, uint16_t* out, cudaStream_t s) {
  if (num_tokens > 0)
    launch(embed_kernel, num_tokens, threads_for(hidden), 0, s, ids, sampled, table, rows, hidden, first_id, out);
}

void rms_norm(const uint16_t* x, const float* w, int rows, int dim, float eps, uint16_t* out, cudaStream_t s) {
  if (rows <= 0) return;
  if (vector_norm(dim)) {
    launch(rms_norm_vec_kernel<false>, rows, kNormThreads, 0, s, nullptr, x, w, dim, eps, out);
  } else {
    launch(rms_norm_kernel, rows, threads_for(dim), 0, s, x, w, dim, eps, out);
  }
}

void add_rms_norm(uint16_t* residual, const uint16_t* x, const float* w, int rows, int dim, float eps, uint16_t* out,
                  cudaStream_t s) {
  if (rows <= 0) return;
  if (vector_norm(dim)) {
    launch(rms_norm_vec_kernel<true>, rows, kNormThreads, 0, s, residual, x, w, dim, eps, out);
  } else {
    launch(add_rms_norm_kernel, rows, threads_for(dim), 0, s, residual, x, w, dim, eps, out);
  }
}

void swiglu(const uint16_t* gate_up, int64_t rows, int inter, uint16_t* out, cudaStream_t s) {
  const int vec = inter % 8 == 0 ? 8 : 1;
  const int64_t n = rows * inter / vec;
  if (n <= 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535));
  if (vec == 8) {
    launch(swiglu_kernel<8>, blocks, 256, 0, s, gate_up, rows, inter, out);
  } else {
    launch(swiglu_kernel<1>, blocks, 256, 0, s, gate_up, rows, inter, out);
  }
}

void gather_rows(const uint16_t* x, const int32_t* indices, int count, int dim, uint16_t* out, cudaStream_t s) {
  if (count > 0) launch(gather_rows_kernel, count, threads_for(dim), 0, s, x, indices, dim, out);
}

}  // namespace photon::cuda
