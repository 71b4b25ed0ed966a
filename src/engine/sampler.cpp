#include "engine/sampler.hpp"

#include "cpu/kernels.hpp"

#include <algorithm>
#include <cmath>

namespace photon {
namespace {

bool has_penalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

// Applies the three penalties in place. `counts` is vocabulary-sized and all zero on entry and exit.
void apply_penalties(std::vector<float>& logits, const SamplingParams& p, std::span<const int32_t> prompt,
                     std::span<const int32_t> output, std::vector<int32_t>& counts) {
  if (counts.size() < logits.size()) counts.assign(logits.size(), 0);
  if (p.repetition_penalty != 1.0f) {
    // Each distinct token of prompt and output is penalised once (transformers' RepetitionPenaltyLogitsProcessor).
    auto penalise = [&](int32_t t) {
      int32_t& seen = counts[static_cast<size_t>(t)];
      if (seen < 0) return;
      seen = -1;
      float& l = logits[static_cast<size_t>(t)];
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    };
    for (int32_t t : prompt) penalise(t);
    for (int32_t t : output) penalise(t);
    for (int32_t t : prompt) counts[static_cast<size_t>(t)] = 0;
    for (int32_t t : output) counts[static_cast<size_t>(t)] = 0;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (int32_t t : output) ++counts[static_cast<size_t>(t)];
    for (int32_t t : output) {
      int32_t& c = counts[static_cast<size_t>(t)];
      if (c == 0) continue;  // already applied for this token
      logits[static_cast<size_t>(t)] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(c);
      c = 0;
    }
  }
}

}  // namespace

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int k) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  const double lse = max_logit + std::log(sum);
  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(logits[static_cast<size_t>(token)] - lse);
  k = std::min<int>(k, static_cast<int>(logits.size()));
  if (k > 0) {
    // One pass keeping the k best in a small sorted buffer: O(V k) worst case, O(V) typically.
    std::vector<int32_t> best;
    best.reserve(static_cast<size_t>(k) + 1);
    auto better = [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
             (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
    };
    for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
      if (static_cast<int>(best.size()) == k && !better(i, best.back())) continue;
      best.insert(std::upper_bound(best.begin(), best.end(), i, better), i);
      if (static_cast<int>(best.size()) > k) best.pop_back();
    }
    for (int32_t id : best) out.top.emplace_back(id, static_cast<float>(logits[static_cast<size_t>(id)] - lse));
  }
  return out;
}

int32_t sample_next_token(std::span<const float> raw, const SamplingParams& p, std::span<const int32_t> prompt,
                          std::span<const int32_t> output, uint64_t seed, uint64_t index, SamplerScratch& s) {
  std::span<const float> logits = raw;
  if (has_penalties(p)) {
    s.logits.assign(raw.begin(), raw.end());
    apply_penalties(s.logits, p, prompt, output, s.counts);
    logits = s.logits;
  }
  return cpu::sample_row(logits, sample_request(p, seed, index), s.ids);
}

SampleRequest sample_request(const SamplingParams& p, uint64_t seed, uint64_t index) {
  SampleRequest r;
  r.temperature = p.temperature;
  r.top_k = p.top_k;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.seed = seed;
  r.index = index;
  return r;
}

}  // namespace photon
