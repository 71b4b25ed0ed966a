// Host-side token selection and log-probabilities over one row of logits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <photon/sampling.hpp>

namespace photon {

/// log_softmax(logits)[token] and the top `k` entries (k may be 0), computed in double precision.
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int k);

/// The id with the largest logit (the lowest such id on ties).
int32_t argmax(std::span<const float> logits);

/// A uniform double in [0, 1) that depends only on (seed, index): a request's draws are reproducible whatever
/// else is batched, and are not disturbed when a preempted request recomputes its tokens.
double random_uniform(uint64_t seed, uint64_t index);

/// Reusable buffers so that sampling allocates nothing in steady state. One per thread.
struct SamplerScratch {
  std::vector<float> logits;
  std::vector<int32_t> ids;
  std::vector<int32_t> counts;  // per-token occurrence counts, vocabulary-sized, kept zeroed between calls
};

/// Chooses the next token: penalties (repetition over prompt and output; presence and frequency over output),
/// then temperature, top-k, top-p and min-p, then a draw with `uniform` in [0, 1). Greedy when temperature is 0.
int32_t sample_next_token(std::span<const float> logits, const SamplingParams& params,
                          std::span<const int32_t> prompt, std::span<const int32_t> output, double uniform,
                          SamplerScratch& scratch);

}  // namespace photon
