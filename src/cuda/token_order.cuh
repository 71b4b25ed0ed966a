// The order of a row's tokens on the GPU — logit descending, then id ascending — and the search for a prefix of it
// without sorting: a search over the 32-bit order keys of the logits, each pass over the row scoring eight
// candidate thresholds at once (a count of tokens, or their probability mass), then, when the cut falls inside a
// run of equal logits, a search over ids among them. About a dozen passes over the row; a row of logits (at most a
// few hundred KB) stays in L2. Shared by the sampler (top-k, top-p) and the logprobs' top tokens. A row is scored by a
// team: one block of kThreads threads (SoloTeam), or the blocks of a thread block cluster, each over its share of the
// row, that add their scores together (the sampler's).
#pragma once

#include <climits>
#include <cstdint>

#include "cuda/common.cuh"

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

// One block scoring a whole row: the reductions are block_sums.
struct SoloTeam {
  double (*scratch)[kPoints];  // the block's shared memory for block_sums
  int begin;                   // the tokens [begin, end) this block scores: the row
  int end;

  __device__ void sums(const float (&part)[kPoints], double (&out)[kPoints]) { block_sums(part, out, scratch); }
};

struct Row {
  const float* logits;
  int vocab;
  float max_logit;
  float inv_t;  // 1 / temperature
};

// Probability of a logit relative to the best one's (unnormalised).
__device__ __forceinline__ float weight(const Row& r, float logit) { return expf((logit - r.max_logit) * r.inv_t); }

// The shortest prefix of the tokens inside `within` whose score reaches `target` (which must not exceed the score of
// all of them): score = count of tokens (kMass false) or their probability mass. Each thread scores tokens of the
// team's span [team.begin, team.end); team.sums(part, out) gives every thread of the team the same sums of the parts
// (a team that is several blocks adds them in one order, so every block takes the same decisions). Contains
// barriers: every thread of the team calls it.
template <bool kMass, class Team>
__device__ Cut find_cut(const Row& r, Cut within, double target, Team& team) {
  // S(c) = score of the tokens inside `within` with key >= c, non-increasing in c. Invariant: S(lo) >= target,
  // S(hi + 1) = above < target.
  uint64_t lo = 0, hi = 0xffffffffull;
  double above = 0.0;
  while (lo < hi) {
    uint32_t point[kPoints];
#pragma unroll
    for (int j = 0; j < kPoints; ++j) point[j] = static_cast<uint32_t>(lo + (hi - lo + 1) * (j + 1) / (kPoints + 1));
    float part[kPoints] = {};
    for (int i = team.begin + static_cast<int>(threadIdx.x); i < team.end; i += kThreads) {
      const float logit = r.logits[i];
      const uint32_t key = order_key(logit);
      if (!inside(key, i, within)) continue;
      const float score = kMass ? weight(r, logit) : 1.0f;
#pragma unroll
      for (int j = 0; j < kPoints; ++j) part[j] += key >= point[j] ? score : 0.0f;
    }
    double s[kPoints];
    team.sums(part, s);
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
  for (int i = team.begin + static_cast<int>(threadIdx.x); i < team.end; i += kThreads) {
    if (order_key(r.logits[i]) == key && inside(key, i, within)) part[0] += 1.0f;
  }
  double s[kPoints];
  team.sums(part, s);
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
    const int stop = team.end < mid + 1 ? team.end : mid + 1;
    for (int i = team.begin + static_cast<int>(threadIdx.x); i < stop; i += kThreads) {
      if (order_key(r.logits[i]) == key && inside(key, i, within)) count[0] += 1.0f;
    }
    team.sums(count, s);
    if (static_cast<int64_t>(s[0]) >= take) {
      hi_id = mid;
    } else {
      lo_id = mid + 1;
    }
  }
  return Cut{key, lo_id};
}

}  // namespace
}  // namespace photon::cuda
