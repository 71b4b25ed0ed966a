// RMSNorm, plain and fused with the residual add: one block per row, 16-byte vectors held in registers where the
// row fits (dim % 8 == 0, up to 8192), a scalar loop otherwise.
#include "cuda/common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"
#include "cuda/row_norm.cuh"

namespace photon::cuda {
namespace {

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

int threads_for(int dim) { return dim >= 1024 ? 256 : (dim >= 256 ? 128 : 64); }

}  // namespace

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

}  // namespace photon::cuda
