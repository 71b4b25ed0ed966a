// Token selection on the GPU, one block per row, so only ids cross to the host: argmax, or a Gumbel-max draw among
// the tokens that top-k, top-p and min-p keep — the selection of the host sampler (cpu::sample_row), with the same
// draws (core/random.hpp).
//
// top-k and top-p keep a prefix of the tokens in the order (logit descending, id ascending). The kernel finds that
// prefix's last token without sorting: a search over the 32-bit order keys of the logits, each pass over the row
// scoring eight candidate thresholds at once (count of tokens for top-k, probability mass for top-p), then, when
// the cut falls inside a run of equal logits, a search over ids among them. About a dozen passes over the row; the
// row (at most a few hundred KB) stays in L2.
#include <climits>

#include "core/random.hpp"
#include "cuda/common.cuh"
#include "cuda/kernels.hpp"

namespace photon::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kPoints = 8;  // thresholds scored per pass

// Order-preserving map of floats to unsigned integers (larger float, larger key; -0 and +0 are one value).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = f == 0.0f ? 0u : __float_as_uint(f);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) != 0 ? (k & 0x7fffffffu) : ~k);
}

// A prefix of the order: tokens whose key is above `key`, and those at `key` whose id is at most `id`.
struct Cut {
  uint32_t key;
  int32_t id;
};
__device__ __forceinline__ bool inside(uint32_t key, int32_t id, Cut c) {
  return key > c.key || (key == c.key && id <= c.id);
}

// Sums kPoints per-thread values over the block in f64; every thread gets the sums. Contains barriers.
__device__ void block_sums(const float (&part)[kPoints], double (&out)[kPoints], double (*scratch)[kPoints]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double v[kPoints];
#pragma unroll
  for (int j = 0; j < kPoints; ++j) {
    v[j] = part[j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v[j] += __shfl_xor_sync(0xffffffffu, v[j], o);
  }
  __syncthreads();  // scratch is free
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < kPoints; ++j) scratch[warp][j] = v[j];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kPoints; ++j) {
    double s = 0.0;
    for (int w = 0; w < kWarps; ++w) s += scratch[w][j];
    out[j] = s;
  }
}

struct Row {
  const float* logits;
  int vocab;
  float max_logit;
  float inv_t;  // 1 / temperature
};

// Probability of a logit relative to the best one's (unnormalised).
__device__ __forceinline__ float weight(const Row& r, float logit) { return expf((logit - r.max_logit) * r.inv_t); }

// The shortest prefix of the tokens inside `within` whose score reaches `target` (which must not exceed the score of
// all of them): score = count of tokens (kMass false) or their probability mass.
template <bool kMass>
__device__ Cut find_cut(const Row& r, Cut within, double target, double (*scratch)[kPoints]) {
  // S(c) = score of the tokens inside `within` with key >= c, non-increasing in c. Invariant: S(lo) >= target,
  // S(hi + 1) = above < target.
  uint64_t lo = 0, hi = 0xffffffffull;
  double above = 0.0;
  while (lo < hi) {
    uint32_t point[kPoints];
#pragma unroll
    for (int j = 0; j < kPoints; ++j) point[j] = static_cast<uint32_t>(lo + (hi - lo + 1) * (j + 1) / (kPoints + 1));
    float part[kPoints] = {};
    for (int i = threadIdx.x; i < r.vocab; i += kThreads) {
      const float logit = r.logits[i];
      const uint32_t key = order_key(logit);
      if (!inside(key, i, within)) continue;
      const float score = kMass ? weight(r, logit) : 1.0f;
#pragma unroll
      for (int j = 0; j < kPoints; ++j) part[j] += key >= point[j] ? score : 0.0f;
    }
    double s[kPoints];
    block_sums(part, s, scratch);
    for (int j = 0; j < kPoints; ++j) {
      if (s[j] >= target) {
        lo = point[j] > lo ? point[j] : lo;
      } else {
        if (point[j] - 1ull < hi) {
          hi = point[j] - 1ull;
          above = s[j];
        }
        break;  // S only falls further
      }
    }
  }
  const auto key = static_cast<uint32_t>(lo);
  // Tokens at the cut's key share one logit: take as many of them, in id order, as reach the target.
  float part[kPoints] = {};
  for (int i = threadIdx.x; i < r.vocab; i += kThreads) {
    if (order_key(r.logits[i]) == key && inside(key, i, within)) part[0] += 1.0f;
  }
  double s[kPoints];
  block_sums(part, s, scratch);
  const auto ties = static_cast<int64_t>(s[0]);
  int64_t take = 0;
  if (kMass) {
    const double w = weight(r, key_value(key));
    for (double mass = above; mass < target && take < ties; ++take) mass += w;
  } else {
    take = static_cast<int64_t>(target - above);
  }
  take = take < 1 ? 1 : take;
  if (take >= ties) return Cut{key, within.key == key ? within.id : INT_MAX};
  // The id of the take-th tied token: the smallest x with `take` tied tokens at ids <= x.
  int lo_id = 0, hi_id = r.vocab - 1;
  while (lo_id < hi_id) {
    const int mid = lo_id + (hi_id - lo_id) / 2;
    float count[kPoints] = {};
    for (int i = threadIdx.x; i <= mid; i += kThreads) {
      if (order_key(r.logits[i]) == key && inside(key, i, within)) count[0] += 1.0f;
    }
    block_sums(count, s, scratch);
    if (static_cast<int64_t>(s[0]) >= take) {
      hi_id = mid;
    } else {
      lo_id = mid + 1;
    }
  }
  return Cut{key, lo_id};
}

// One block per row; each listed token is distinct, so the threads never touch the same logit. The _rn intrinsics
// keep every product and sum rounded on its own (no fused multiply-add), as the host computes them.
__global__ void __launch_bounds__(kThreads)
    penalties_kernel(float* logits, int vocab, const SampleRequest* args, const PenaltyToken* tokens) {
  const SampleRequest a = args[blockIdx.x];
  if (a.penalty_count == 0) return;
  float* row = logits + static_cast<int64_t>(a.row) * vocab;
  const bool additive = a.presence_penalty != 0.0f || a.frequency_penalty != 0.0f;
  for (int i = threadIdx.x; i < a.penalty_count; i += kThreads) {
    const PenaltyToken e = tokens[a.penalty_begin + i];
    float l = row[e.token];
    if (a.repetition_penalty != 1.0f) {
      l = l > 0.0f ? __fdiv_rn(l, a.repetition_penalty) : __fmul_rn(l, a.repetition_penalty);
    }
    if (additive && e.output_count > 0) {
      const float frequency = __fmul_rn(a.frequency_penalty, static_cast<float>(e.output_count));
      l = __fsub_rn(l, __fadd_rn(a.presence_penalty, frequency));
    }
    row[e.token] = l;
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

void apply_penalties(float* logits, int vocab, const SampleRequest* args, int n, const PenaltyToken* tokens,
                     cudaStream_t s) {
  if (n > 0) penalties_kernel<<<n, kThreads, 0, s>>>(logits, vocab, args, tokens);
}

}  // namespace photon::cuda
