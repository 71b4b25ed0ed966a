// RoPE of one attention head as one warp computes it: shared by the q/k/v epilogue kernel (rope.cu) and the decode
// attention kernel that rotates its own queries and new key (attention.cu), so that both round alike.
#pragma once

#include "cuda/common.cuh"

namespace photon::cuda {

constexpr int kRopeMaxPairsPerLane = 4;  // head_dim <= 2 * 32 * 4

/// Lane l of the warp loads the rotation pairs (x[p], x[p + hd / 2]) of head `src` (bf16 [hd]) for
/// p = l, l + 32, ... into a and b (zeros past the half).
__device__ __forceinline__ void load_head_pairs(const uint16_t* src, int hd, float (&a)[kRopeMaxPairsPerLane],
                                                float (&b)[kRopeMaxPairsPerLane]) {
  const int lane = threadIdx.x & 31, half = hd / 2;
#pragma unroll
  for (int j = 0; j < kRopeMaxPairsPerLane; ++j) {
    const int p = lane + 32 * j;
    a[j] = p < half ? bf2f(src[p]) : 0.0f;
    b[j] = p < half ? bf2f(src[p + half]) : 0.0f;
  }
}

/// The whole warp: the optional per-head RMSNorm (Qwen3's q/k norm; `norm` f32 [hd] or null), rounded to bf16 as a
/// separate norm would store it, then rotate-half RoPE with the token's cos/sin (f32 [hd / 2]). a and b become the
/// rotated pairs, not yet rounded.
__device__ __forceinline__ void norm_rotate_pairs(float (&a)[kRopeMaxPairsPerLane], float (&b)[kRopeMaxPairsPerLane],
                                                  int hd, const float* norm, float eps, const float* cos,
                                                  const float* sin) {
  const int lane = threadIdx.x & 31, half = hd / 2;
  if (norm != nullptr) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kRopeMaxPairsPerLane; ++j) ss += a[j] * a[j] + b[j] * b[j];
    const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(hd) + eps);
#pragma unroll
    for (int j = 0; j < kRopeMaxPairsPerLane; ++j) {
      const int p = lane + 32 * j;
      if (p < half) {
        a[j] = bf2f(f2bf(norm[p] * (a[j] * inv)));
        b[j] = bf2f(f2bf(norm[p + half] * (b[j] * inv)));
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kRopeMaxPairsPerLane; ++j) {
    const int p = lane + 32 * j;
    if (p < half) {
      const float x = a[j], y = b[j];
      a[j] = x * cos[p] - y * sin[p];
      b[j] = y * cos[p] + x * sin[p];
    }
  }
}

/// Stores the pairs as bf16 to dst [hd].
__device__ __forceinline__ void store_head_pairs(const float (&a)[kRopeMaxPairsPerLane],
                                                 const float (&b)[kRopeMaxPairsPerLane], int hd, uint16_t* dst) {
  const int lane = threadIdx.x & 31, half = hd / 2;
#pragma unroll
  for (int j = 0; j < kRopeMaxPairsPerLane; ++j) {
    const int p = lane + 32 * j;
    if (p < half) {
      dst[p] = f2bf(a[j]);
      dst[p + half] = f2bf(b[j]);
    }
  }
}

}  // namespace photon::cuda
