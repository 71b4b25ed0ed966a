// What the engine tells a backend's sampler about a request: its draw (SampleRequest) and the logits it adjusts
// first (LogitAdjustment: logit bias and penalties).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <photon/sampling.hpp>

#include "core/sample_request.hpp"

namespace photon {

/// The id with the largest logit (the lowest such id on ties).
int32_t argmax(std::span<const float> logits);

/// Whether a request's logits are adjusted before the selection: a logit bias or any of the three penalties.
bool has_adjustments(const SamplingParams& params);

/// Appends a request's logit adjustments to `out`: each distinct token of the prompt, then of the output, then of
/// the logit bias once, with its output count, its bias and whether it is in context (the repetition penalty applies
/// to prompt and output tokens only; presence and frequency to output tokens). Penalties that are off add nothing:
/// with no penalties only the biased tokens are listed. `counts` is scratch indexed by token id, grown as needed and
/// all zero on entry and on return.
void append_logit_adjustments(const SamplingParams& params, std::span<const int32_t> prompt,
                              std::span<const int32_t> output, std::vector<int32_t>& counts,
                              std::vector<LogitAdjustment>& out);

/// The backend's description of draw `index` of a request's stream `seed` with these parameters (row 0, no
/// adjustments yet: the caller sets row, logprobs, adjustment_begin and adjustment_count).
SampleRequest sample_request(const SamplingParams& params, uint64_t seed, uint64_t index);

}  // namespace photon
