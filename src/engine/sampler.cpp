#include "engine/sampler.hpp"

#include "cpu/kernels.hpp"

#include <algorithm>
#include <cmath>

namespace photon {
bool has_penalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

void append_penalty_tokens(std::span<const int32_t> prompt, std::span<const int32_t> output,
                           std::vector<int32_t>& counts, std::vector<PenaltyToken>& out) {
  // counts[t]: occurrences in the output, then -1 once t is listed; all zero again on return.
  for (int32_t t : output) {
    if (static_cast<size_t>(t) >= counts.size()) counts.resize(static_cast<size_t>(t) + 1, 0);
    ++counts[static_cast<size_t>(t)];
  }
  auto list = [&](int32_t t) {
    if (static_cast<size_t>(t) >= counts.size()) counts.resize(static_cast<size_t>(t) + 1, 0);
    int32_t& c = counts[static_cast<size_t>(t)];
    if (c < 0) return;
    out.push_back({t, c});
    c = -1;
  };
  for (int32_t t : prompt) list(t);
  for (int32_t t : output) list(t);
  for (int32_t t : prompt) counts[static_cast<size_t>(t)] = 0;
  for (int32_t t : output) counts[static_cast<size_t>(t)] = 0;
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t sample_next_token(std::span<const float> raw, const SamplingParams& p, std::span<const int32_t> prompt,
                          std::span<const int32_t> output, uint64_t seed, uint64_t index, SamplerScratch& s) {
  const SampleRequest r = sample_request(p, seed, index);
  if (!has_penalties(p) && p.logit_bias.empty()) return cpu::sample_row(raw, r, s.ids);
  s.logits.assign(raw.begin(), raw.end());  // the caller's row stays the model's (its logprobs are read from it)
  for (const auto& [id, bias] : p.logit_bias) s.logits[static_cast<size_t>(id)] += bias;
  s.penalties.clear();
  append_penalty_tokens(prompt, output, s.counts, s.penalties);
  cpu::apply_penalties(s.logits, r, s.penalties);
  return cpu::sample_row(s.logits, r, s.ids);
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
