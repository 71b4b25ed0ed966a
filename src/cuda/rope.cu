// RoPE (rotate-half) on q and k, fused with the write of k and v into the paged KV cache.
#include "cuda/common.cuh"
#include "cuda/kernels.cuh"

namespace photon::cuda {
namespace {

__global__ void cos_sin_kernel(const int32_t* positions, const float* inv_freq, int half, float* cos, float* sin) {
  const int t = blockIdx.x;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    // The angle is rounded to f32 exactly as transformers computes it; sincos itself in full precision.
    const float angle = static_cast<float>(positions[t]) * inv_freq[i];
    float c, s;
    sincosf(angle, &s, &c);
    cos[t * half + i] = c;
    sin[t * half + i] = s;
  }
}

__global__ void rope_cache_kernel(uint16_t* q, uint16_t* k, const uint16_t* v, const float* cos, const float* sin,
                                  const int32_t* slots, int heads, int kv_heads, int hd, uint16_t* cache,
                                  int block_size) {
  const int t = blockIdx.x;
  const int half = hd / 2;
  const float* c = cos + static_cast<int64_t>(t) * half;
  const float* s = sin + static_cast<int64_t>(t) * half;
  const int pairs = (heads + kv_heads) * half;
  for (int idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
    const int head = idx / half, i = idx % half;
    uint16_t* base = head < heads ? q + (static_cast<int64_t>(t) * heads + head) * hd
                                  : k + (static_cast<int64_t>(t) * kv_heads + (head - heads)) * hd;
    const float a = bf2f(base[i]), b = bf2f(base[i + half]);
    base[i] = f2bf(a * c[i] - b * s[i]);
    base[i + half] = f2bf(b * c[i] + a * s[i]);
  }
  __syncthreads();
  const int slot = slots[t];
  if (slot < 0) return;
  const int64_t block = slot / block_size, offset = slot % block_size;
  const int row = kv_heads * hd;
  for (int idx = threadIdx.x; idx < row; idx += blockDim.x) {
    const int h = idx / hd, d = idx % hd;
    const int64_t kdst = (((block * 2 + 0) * kv_heads + h) * block_size + offset) * hd + d;
    const int64_t vdst = (((block * 2 + 1) * kv_heads + h) * block_size + offset) * hd + d;
    cache[kdst] = k[static_cast<int64_t>(t) * row + idx];
    cache[vdst] = v[static_cast<int64_t>(t) * row + idx];
  }
}

}  // namespace

void rope_cos_sin(const int32_t* positions, int num_tokens, const float* inv_freq, int half, float* cos, float* sin,
                  cudaStream_t s) {
  if (num_tokens > 0) cos_sin_kernel<<<num_tokens, 64, 0, s>>>(positions, inv_freq, half, cos, sin);
}

void rope_cache_write(uint16_t* q, uint16_t* k, const uint16_t* v, const float* cos, const float* sin,
                      const int32_t* slots, int num_tokens, int heads, int kv_heads, int head_dim, uint16_t* cache,
                      int block_size, cudaStream_t s) {
  if (num_tokens > 0) {
    rope_cache_kernel<<<num_tokens, 128, 0, s>>>(q, k, v, cos, sin, slots, heads, kv_heads, head_dim, cache,
                                                 block_size);
  }
}

}  // namespace photon::cuda
