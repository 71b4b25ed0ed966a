#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>

namespace photon {

namespace {

bool has_penalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

}  // namespace

bool has_adjustments(const SamplingParams& p) { return has_penalties(p) || !p.logit_bias.empty(); }

void append_logit_adjustments(const SamplingParams& p, std::span<const int32_t> prompt, std::span<const int32_t> output,
                              std::vector<int32_t>& counts, std::vector<LogitAdjustment>& out) {
  auto at = [&](int32_t t) -> int32_t& {
    if (static_cast<size_t>(t) >= counts.size()) counts.resize(static_cast<size_t>(t) + 1, 0);
    return counts[static_cast<size_t>(t)];
  };
  // counts[t]: occurrences in the output, then -(index + 1) of t's entry in `out` once listed; zero again on return.
  const bool penalties = has_penalties(p);
  if (penalties) {
    for (int32_t t : output) ++at(t);
    auto list = [&](int32_t t) {
      int32_t& c = at(t);
      if (c < 0) return;
      out.push_back({t, c, 0.0f, 1});
      c = -static_cast<int32_t>(out.size());
    };
    for (int32_t t : prompt) list(t);
    for (int32_t t : output) list(t);
  }
  for (const auto& [t, bias] : p.logit_bias) {  // ids are distinct (SamplingParams::validate)
    int32_t& c = at(t);
    if (c < 0) {
      out[static_cast<size_t>(-c - 1)].bias = bias;
    } else {
      out.push_back({t, 0, bias, 0});
      c = -static_cast<int32_t>(out.size());
    }
  }
  if (penalties) {
    for (int32_t t : prompt) counts[static_cast<size_t>(t)] = 0;
    for (int32_t t : output) counts[static_cast<size_t>(t)] = 0;
  }
  for (const auto& entry : p.logit_bias) counts[static_cast<size_t>(entry.first)] = 0;
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

SampleRequest sample_request(const SamplingParams& p, uint64_t seed, uint64_t index) {
  SampleRequest r;
  r.temperature = p.temperature;
  r.top_k = p.top_k;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.seed = seed;
  r.index = index;
  r.repetition_penalty = p.repetition_penalty;
  r.presence_penalty = p.presence_penalty;
  r.frequency_penalty = p.frequency_penalty;
  return r;
}

}  // namespace photon
