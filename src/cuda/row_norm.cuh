// Device pieces of the vectorised RMSNorm, shared by the norm kernels (rms_norm.cu) and the all-reduce fused with
// the norm (peer_all_reduce.cu), so that both round exactly alike. A block of kThreads threads owns one row of `dim`
// bf16 values (dim % 8 == 0); thread t holds the row's 16-byte vectors t, t + kThreads, ... (kVecs at most) as f32.
#pragma once

#include "cuda/common.cuh"

namespace photon::cuda {

/// This thread's norm weights (f32 [dim], `vecs` = dim / 8 vectors in the row). Weights are constant, so callers load
/// them before waiting on the previous kernel.
template <int kVecs, int kThreads>
__device__ __forceinline__ void load_norm_weights(const float* w, int vecs, float (&ws)[kVecs][8]) {
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i >= vecs) break;
    const float4 w0 = reinterpret_cast<const float4*>(w)[2 * i], w1 = reinterpret_cast<const float4*>(w)[2 * i + 1];
    ws[j][0] = w0.x, ws[j][1] = w0.y, ws[j][2] = w0.z, ws[j][3] = w0.w;
    ws[j][4] = w1.x, ws[j][5] = w1.y, ws[j][6] = w1.z, ws[j][7] = w1.w;
  }
}

/// out row = ws * v / sqrt(mean of v^2 + eps), where `ss` is this thread's sum of squares of its v. `scratch` holds
/// 32 floats. Contains barriers: every thread of the block calls it.
template <int kVecs, int kThreads>
__device__ __forceinline__ void write_rms_norm(const float (&v)[kVecs][8], const float (&ws)[kVecs][8], float ss,
                                               int vecs, int dim, float eps, uint4* out, float* scratch) {
  const float inv = rsqrtf(block_sum(ss, scratch) / static_cast<float>(dim) + eps);
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i >= vecs) break;
    float o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = ws[j][e] * (v[j][e] * inv);
    out[i] = pack8(o);
  }
}

}  // namespace photon::cuda
