// Token selection on the GPU, one block per row, so only ids cross to the host: argmax, or a Gumbel-max draw among
// the tokens that top-k, top-p and min-p keep — the selection of the host sampler (cpu::sample_row), with the same
// draws (core/random.hpp). top-k and top-p keep a prefix of the tokens in their order (cuda/token_order.cuh), whose
// last token the kernel finds without sorting.
#include "core/random.hpp"
#include "cuda/kernels.hpp"
#include "cuda/token_order.cuh"

namespace photon::cuda {
namespace {

// One block per row; each listed token is distinct, so the threads never touch the same logit. The _rn intrinsics
// keep every product and sum rounded on its own (no fused multiply-add), as the host computes them. The logits of
// rows whose logprobs are wanted are kept in `saved` first (one float per entry), for restore_kernel.
__global__ void __launch_bounds__(kThreads)
    adjust_kernel(float* logits, int vocab, const SampleRequest* args, const LogitAdjustment* entries, float* saved) {
  const SampleRequest a = args[blockIdx.x];
  if (a.adjustment_count == 0) return;
  float* row = logits + static_cast<int64_t>(a.row) * vocab;
  const bool additive = a.presence_penalty != 0.0f || a.frequency_penalty != 0.0f;
  for (int i = threadIdx.x; i < a.adjustment_count; i += kThreads) {
    const LogitAdjustment e = entries[a.adjustment_begin + i];
    float l = row[e.token];
    if (a.logprobs >= 0) saved[a.adjustment_begin + i] = l;
    if (e.bias != 0.0f) l = __fadd_rn(l, e.bias);
    if (e.in_context != 0 && a.repetition_penalty != 1.0f) {
      l = l > 0.0f ? __fdiv_rn(l, a.repetition_penalty) : __fmul_rn(l, a.repetition_penalty);
    }
    if (additive && e.output_count > 0) {
      const float frequency = __fmul_rn(a.frequency_penalty, static_cast<float>(e.output_count));
      l = __fsub_rn(l, __fadd_rn(a.presence_penalty, frequency));
    }
    row[e.token] = l;
  }
}

// Writes back what adjust_kernel kept: the rows whose logprobs are wanted become the model's again.
__global__ void __launch_bounds__(kThreads) restore_kernel(float* logits, int vocab, const SampleRequest* args,
                                                           const LogitAdjustment* entries, const float* saved) {
  const SampleRequest a = args[blockIdx.x];
  if (a.adjustment_count == 0 || a.logprobs < 0) return;
  float* row = logits + static_cast<int64_t>(a.row) * vocab;
  for (int i = threadIdx.x; i < a.adjustment_count; i += kThreads) {
    row[entries[a.adjustment_begin + i].token] = saved[a.adjustment_begin + i];
  }
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, int vocab, const SampleRequest* args, int32_t* out_ids) {
  __shared__ float scratch[32];
  __shared__ double sums[kWarps][kPoints];
  __shared__ float best_values[32];
  __shared__ int best_ids[32];
  const SampleRequest a = args[blockIdx.x];
  const float* row = logits + static_cast<int64_t>(a.row) * vocab;
  const bool greedy = a.temperature <= 0.0f;
  float max_logit = -INFINITY;
  if (!greedy) {
    for (int i = threadIdx.x; i < vocab; i += kThreads) max_logit = fmaxf(max_logit, row[i]);
    max_logit = block_max(max_logit, scratch);
  }
  const double inv_t = greedy ? 1.0 : 1.0 / static_cast<double>(a.temperature);
  Cut cut{0u, INT_MAX};  // every token
  if (!greedy && ((a.top_k > 0 && a.top_k < vocab) || a.top_p < 1.0f)) {
    const Row r{row, vocab, max_logit, static_cast<float>(inv_t)};
    if (a.top_k > 0 && a.top_k < vocab) cut = find_cut<false>(r, cut, static_cast<double>(a.top_k), sums);
    if (a.top_p < 1.0f) {
      float part[kPoints] = {};
      for (int i = threadIdx.x; i < vocab; i += kThreads) {
        if (inside(order_key(row[i]), i, cut)) part[0] += weight(r, row[i]);
      }
      double total[kPoints];
      block_sums(part, total, sums);
      cut = find_cut<true>(r, cut, static_cast<double>(a.top_p) * total[0], sums);
    }
  }
  const double log_min_p = a.min_p > 0.0f ? log(static_cast<double>(a.min_p)) : -INFINITY;
  float best = -INFINITY;
  int best_id = vocab;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    float v;
    if (greedy) {
      v = row[i];
    } else {
      if (!inside(order_key(row[i]), i, cut)) continue;
      const double scaled = (static_cast<double>(row[i]) - static_cast<double>(max_logit)) * inv_t;
      if (scaled < log_min_p) continue;
      v = static_cast<float>(scaled) + gumbel(a.seed, a.index, static_cast<uint32_t>(i));
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
    for (int w = 1; w < kWarps; ++w) {
      if (best_values[w] > best || (best_values[w] == best && best_ids[w] < best_id)) {
        best = best_values[w];
        best_id = best_ids[w];
      }
    }
    out_ids[blockIdx.x] = best_id < vocab ? best_id : 0;
  }
}

}  // namespace

void sample_rows(const float* logits, int vocab, const SampleRequest* args, int n, int32_t* out_ids, cudaStream_t s) {
  if (n > 0) sample_kernel<<<n, kThreads, 0, s>>>(logits, vocab, args, out_ids);
}

void adjust_logits(float* logits, int vocab, const SampleRequest* args, int n, const LogitAdjustment* entries,
                   float* saved, cudaStream_t s) {
  if (n > 0) adjust_kernel<<<n, kThreads, 0, s>>>(logits, vocab, args, entries, saved);
}

void restore_logits(float* logits, int vocab, const SampleRequest* args, int n, const LogitAdjustment* entries,
                    const float* saved, cudaStream_t s) {
  if (n > 0) restore_kernel<<<n, kThreads, 0, s>>>(logits, vocab, args, entries, saved);
}

}  // namespace photon::cuda
