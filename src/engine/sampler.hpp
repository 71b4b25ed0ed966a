// Host-side token selection over one row of logits, with the request's penalties.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <photon/sampling.hpp>

#include "core/backend.hpp"

namespace photon {

/// The id with the largest logit (the lowest such id on ties).
int32_t argmax(std::span<const float> logits);

/// Reusable buffers so that sampling allocates nothing in steady state. One per thread.
struct SamplerScratch {
  std::vector<float> logits;
  std::vector<int32_t> ids;
  std::vector<int32_t> counts;  // per-token occurrence counts, vocabulary-sized, kept zeroed between calls
  std::vector<PenaltyToken> penalties;
};

/// Whether any of the three penalties is active.
bool has_penalties(const SamplingParams& params);

/// Appends a request's penalty tokens (PenaltyToken: each distinct token of prompt and output once, prompt order
/// first, with its count in the output) to `out`. `counts` is scratch indexed by token id, grown as needed and all
/// zero on entry and on return.
void append_penalty_tokens(std::span<const int32_t> prompt, std::span<const int32_t> output,
                           std::vector<int32_t>& counts, std::vector<PenaltyToken>& out);

/// Chooses the next token: the logit bias, penalties (repetition over prompt and output; presence and frequency over
/// output), then temperature, top-k, top-p and min-p (the order of transformers' logits warpers), then a Gumbel-max
/// draw keyed by (seed, index) — see core/random.hpp; the GPU sampler draws the same way. Greedy when temperature is 0.
int32_t sample_next_token(std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> prompt,
                          std::span<const int32_t> output, uint64_t seed, uint64_t index, SamplerScratch& scratch);

/// The backend's description of draw `index` of a request's stream `seed` with these parameters (row 0, no penalty
/// tokens yet: the caller sets row, penalty_begin and penalty_count).
SampleRequest sample_request(const SamplingParams& params, uint64_t seed, uint64_t index);

}  // namespace photon
