// Token selection on the GPU: one block per row, argmax or Gumbel-max with min-p, so only ids cross to the host.
// The draw is the same function of (seed, index, token) as the host sampler's (core/random.hpp).
#include "core/random.hpp"
#include "cuda/common.cuh"
#include "cuda/kernels.cuh"

namespace photon::cuda {
namespace {

constexpr int kThreads = 512;

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, int vocab, const SampleArgs* args, int32_t* out_ids) {
  __shared__ float scratch[32];
  __shared__ float best_values[32];
  __shared__ int best_ids[32];
  const SampleArgs a = args[blockIdx.x];
  const float* row = logits + static_cast<int64_t>(a.row) * vocab;
  const bool greedy = a.temperature <= 0.0f;
  float max_logit = -INFINITY;
  if (!greedy) {
    for (int i = threadIdx.x; i < vocab; i += kThreads) max_logit = fmaxf(max_logit, row[i]);
    max_logit = block_max(max_logit, scratch);
  }
  const float inv_t = greedy ? 1.0f : 1.0f / a.temperature;
  const float log_min_p = a.min_p > 0.0f ? logf(a.min_p) : -INFINITY;
  float best = -INFINITY;
  int best_id = vocab;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    float v;
    if (greedy) {
      v = row[i];
    } else {
      const float scaled = (row[i] - max_logit) * inv_t;
      if (scaled < log_min_p) continue;
      v = scaled + gumbel(a.seed, a.index, static_cast<uint32_t>(i));
    }
    if (v > best) {  // i increases, so ties keep the lower id
      best = v;
      best_id = i;
    }
  }
  // Warp then block argmax; ties go to the lower id.
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, best_id, o);
    if (ov > best || (ov == best && oi < best_id)) {
      best = ov;
      best_id = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    best_values[warp] = best;
    best_ids[warp] = best_id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) {
      if (best_values[w] > best || (best_values[w] == best && best_ids[w] < best_id)) {
        best = best_values[w];
        best_id = best_ids[w];
      }
    }
    out_ids[blockIdx.x] = best_id < vocab ? best_id : 0;
  }
}

}  // namespace

void sample_rows(const float* logits, int vocab, const SampleArgs* args, int n, int32_t* out_ids, cudaStream_t s) {
  if (n > 0) sample_kernel<<<n, kThreads, 0, s>>>(logits, vocab, args, out_ids);
}

}  // namespace photon::cuda
