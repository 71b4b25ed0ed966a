// RoPE (rotate-half) on q and k, fused with Qwen3's q/k RMSNorm, the split of the fused q/k/v projection and the
// write of k and v into the paged KV cache.
#include "cuda/common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"

namespace photon::cuda {
namespace {

__global__ void cos_sin_kernel(const int32_t* positions, const float* inv_freq, int half, float* cos, float* sin) {
  pdl_begin();
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

constexpr int kMaxPairsPerLane = 4;  // head_dim <= 2 * 32 * 4
constexpr int kHeadsPerBlock = 8;    // one warp per head

// One warp per (token, head) of the fused projection: q and k heads are normalised (Qwen3) and rotated, v heads
// copied; q goes to q_out, k and v to the cache. Lane l holds the rotation pairs (p, p + half) for p = l, l + 32, ...
__global__ void __launch_bounds__(kHeadsPerBlock * 32)
    qkv_rope_cache_kernel(const uint16_t* qkv, int64_t ld, const float* q_norm, const float* k_norm, float eps,
                          const float* cos, const float* sin, int heads, PagedKv kv, uint16_t* q_out) {
  const int kv_heads = kv.num_kv_heads, hd = kv.head_dim, block_size = kv.block_size;
  uint16_t* cache = static_cast<uint16_t*>(kv.cache);
  const int t = blockIdx.x;
  const int head = blockIdx.y * kHeadsPerBlock + static_cast<int>(threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  const int half = hd / 2;
  const bool is_q = head < heads, is_v = head >= heads + kv_heads;
  // Before the wait: the slot (a step input) and the head's norm weights (constant).
  const int slot = kv.slot_mapping[t];
  const float* norm = is_q ? q_norm : k_norm;
  const bool normed = !is_v && norm != nullptr;
  float na[kMaxPairsPerLane], nb[kMaxPairsPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int p = lane + 32 * j;
    na[j] = normed && p < half ? norm[p] : 0.0f;
    nb[j] = normed && p < half ? norm[p + half] : 0.0f;
  }
  pdl_begin();
  if (head >= heads + 2 * kv_heads) return;
  // The head's values and its rotation, loaded together so that their latencies overlap.
  const uint16_t* src = qkv + t * ld + static_cast<int64_t>(head) * hd;
  const float* c = cos + static_cast<int64_t>(t) * half;
  const float* s = sin + static_cast<int64_t>(t) * half;
  float a[kMaxPairsPerLane], b[kMaxPairsPerLane], ca[kMaxPairsPerLane], sa[kMaxPairsPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int p = lane + 32 * j;
    a[j] = p < half ? bf2f(src[p]) : 0.0f;
    b[j] = p < half ? bf2f(src[p + half]) : 0.0f;
    ca[j] = !is_v && p < half ? c[p] : 0.0f;
    sa[j] = !is_v && p < half ? s[p] : 0.0f;
  }
  const int64_t block = slot / block_size, offset = slot % block_size;
  const auto cache_row = [&](int which, int h) {
    return cache + (((block * 2 + which) * kv_heads + h) * block_size + offset) * hd;
  };
  if (is_v) {  // v: straight to the cache
    if (slot < 0) return;
    uint16_t* dst = cache_row(1, head - heads - kv_heads);
#pragma unroll
    for (int j = 0; j < kMaxPairsPerLane; ++j) {
      const int p = lane + 32 * j;
      if (p < half) {
        dst[p] = src[p];
        dst[p + half] = src[p + half];
      }
    }
    return;
  }
  if (normed) {  // RMSNorm over the head, rounded to bf16 as a separate norm would store it
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPairsPerLane; ++j) ss += a[j] * a[j] + b[j] * b[j];
    const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(hd) + eps);
#pragma unroll
    for (int j = 0; j < kMaxPairsPerLane; ++j) {
      a[j] = bf2f(f2bf(na[j] * (a[j] * inv)));
      b[j] = bf2f(f2bf(nb[j] * (b[j] * inv)));
    }
  }
  if (!is_q && slot < 0) return;
  uint16_t* dst = is_q ? q_out + (static_cast<int64_t>(t) * heads + head) * hd : cache_row(0, head - heads);
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int p = lane + 32 * j;
    if (p < half) {
      dst[p] = f2bf(a[j] * ca[j] - b[j] * sa[j]);
      dst[p + half] = f2bf(b[j] * ca[j] + a[j] * sa[j]);
    }
  }
}

}  // namespace

void rope_cos_sin(const int32_t* positions, int num_tokens, const float* inv_freq, int half, float* cos, float* sin,
                  cudaStream_t s) {
  if (num_tokens > 0) launch(cos_sin_kernel, num_tokens, 64, 0, s, positions, inv_freq, half, cos, sin);
}

bool qkv_rope_supported(int head_dim) { return head_dim % 2 == 0 && head_dim <= 2 * 32 * kMaxPairsPerLane; }

void qkv_rope_cache_write(const uint16_t* qkv, int64_t ld, const float* q_norm, const float* k_norm, float eps,
                          const float* cos, const float* sin, int num_tokens, int heads, const PagedKv& kv,
                          uint16_t* q_out, cudaStream_t s) {
  if (num_tokens <= 0) return;
  const dim3 grid(num_tokens, (heads + 2 * kv.num_kv_heads + kHeadsPerBlock - 1) / kHeadsPerBlock);
  launch(qkv_rope_cache_kernel, grid, kHeadsPerBlock * 32, 0, s, qkv, ld, q_norm, k_norm, eps, cos, sin, heads, kv,
         q_out);
}

}  // namespace photon::cuda
