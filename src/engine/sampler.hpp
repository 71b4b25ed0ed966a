// Host-side token selection and log-probabilities over one row of logits.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace photon {

/// Log-probability of one token under a distribution, with that distribution's most likely tokens.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  ///< (id, logprob), most likely first; ties by lower id
};

/// log_softmax(logits)[token] and the top `k` entries (k may be 0), computed in double precision.
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int k);

/// The id with the largest logit (the lowest such id on ties).
int32_t argmax(std::span<const float> logits);

/// Greedy when temperature <= 0, else a draw from softmax(logits / temperature) using `rng`.
int32_t sample_token(std::span<const float> logits, float temperature, std::mt19937_64& rng);

}  // namespace photon
