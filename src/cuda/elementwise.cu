// Embedding lookup, RMSNorm (plain and fused with the residual add), SwiGLU and row gathers.
#include "cuda/common.cuh"
#include "cuda/kernels.cuh"

namespace photon::cuda {
namespace {

__global__ void embed_kernel(const int32_t* ids, const uint16_t* table, int rows, int hidden, int first_id,
                             uint16_t* out) {
  const int t = blockIdx.x;
  const int r = ids[t] - first_id;
  uint16_t* dst = out + static_cast<int64_t>(t) * hidden;
  if (r < 0 || r >= rows) {  // another rank's slice of the vocabulary
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = 0;
    return;
  }
  const uint16_t* row = table + static_cast<int64_t>(r) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = row[i];
}

__global__ void rms_norm_kernel(const uint16_t* x, const float* w, int dim, float eps, uint16_t* out) {
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

// residual = bf16(residual + x) (as transformers adds in bf16), then out = rms_norm(residual).
__global__ void add_rms_norm_kernel(uint16_t* residual, const uint16_t* x, const float* w, int dim, float eps,
                                    uint16_t* out) {
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

// out[r, j] = silu(gate_up[r, j]) * gate_up[r, inter + j].
__global__ void swiglu_kernel(const uint16_t* gate_up, int64_t rows, int inter, uint16_t* out) {
  const int64_t n = rows * inter;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / inter, j = i % inter;
    const float g = bf2f(gate_up[r * 2 * inter + j]);
    out[i] = f2bf(g / (1.0f + __expf(-g)) * bf2f(gate_up[r * 2 * inter + inter + j]));
  }
}

__global__ void gather_rows_kernel(const uint16_t* x, const int32_t* indices, int dim, uint16_t* out) {
  const uint16_t* src = x + static_cast<int64_t>(indices[blockIdx.x]) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[static_cast<int64_t>(blockIdx.x) * dim + i] = src[i];
}

int threads_for(int dim) { return dim >= 1024 ? 256 : (dim >= 256 ? 128 : 64); }

}  // namespace

void embed(const int32_t* ids, int num_tokens, const uint16_t* table, int rows, int hidden, int first_id, uint16_t* out,
           cudaStream_t s) {
  if (num_tokens > 0) embed_kernel<<<num_tokens, threads_for(hidden), 0, s>>>(ids, table, rows, hidden, first_id, out);
}

void rms_norm(const uint16_t* x, const float* w, int rows, int dim, float eps, uint16_t* out, cudaStream_t s) {
  if (rows > 0) rms_norm_kernel<<<rows, threads_for(dim), 0, s>>>(x, w, dim, eps, out);
}

void add_rms_norm(uint16_t* residual, const uint16_t* x, const float* w, int rows, int dim, float eps, uint16_t* out,
                  cudaStream_t s) {
  if (rows > 0) add_rms_norm_kernel<<<rows, threads_for(dim), 0, s>>>(residual, x, w, dim, eps, out);
}

void swiglu(const uint16_t* gate_up, int64_t rows, int inter, uint16_t* out, cudaStream_t s) {
  const int64_t n = rows * inter;
  if (n <= 0) return;
  const int64_t blocks = (n + 255) / 256;
  swiglu_kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0, s>>>(gate_up, rows, inter, out);
}

void gather_rows(const uint16_t* x, const int32_t* indices, int count, int dim, uint16_t* out, cudaStream_t s) {
  if (count > 0) gather_rows_kernel<<<count, threads_for(dim), 0, s>>>(x, indices, dim, out);
}

}  // namespace photon::cuda
