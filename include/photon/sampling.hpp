// PhotonInfer — per-request sampling parameters and log-probability records.
//
// Plain values: copy them freely between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <photon/export.hpp>
#include <photon/status.hpp>

namespace photon {

/// How one request chooses its tokens and when it stops. Defaults follow vLLM and the OpenAI API.
struct SamplingParams {
  /// Softmax temperature; 0 selects greedy decoding (the most likely token, lowest id on ties).
  float temperature = 1.0f;
  /// Keep only the k most likely tokens; 0 (or -1) disables.
  int32_t top_k = 0;
  /// Keep the smallest set of most likely tokens whose probability reaches top_p; 1 disables.
  float top_p = 1.0f;
  /// Drop tokens whose probability is below min_p times the most likely token's; 0 disables.
  float min_p = 0.0f;
  /// Divides positive logits (multiplies negative ones) of tokens already in the prompt or output; 1 disables.
  float repetition_penalty = 1.0f;
  /// Subtracted from the logits of tokens already generated at least once (OpenAI semantics); 0 disables.
  float presence_penalty = 0.0f;
  /// Subtracted once per previous occurrence in the generated tokens; 0 disables.
  float frequency_penalty = 0.0f;
  /// Tokens to generate at most.
  int32_t max_tokens = 16;
  /// Seed of this request's random stream: the same seed gives the same tokens whatever else is batched.
  /// Without one, the stream derives from the engine seed and the request id.
  std::optional<uint64_t> seed;
  /// Keep generating past the model's end-of-sequence ids.
  bool ignore_eos = false;
  /// Extra ids that end the request (the id is kept in the output, like EOS).
  std::vector<int32_t> stop_token_ids;
  /// Strings that end the request; the matched string and anything after it are not returned.
  std::vector<std::string> stop;
  /// Report each generated token's logprob and the top N alternatives (0: just the token's).
  std::optional<int32_t> logprobs;
  /// Report each prompt token's logprob (from position 1) and the top N at its position.
  std::optional<int32_t> prompt_logprobs;
  /// Scheduling priority: lower values are admitted first and preempted last. Ties: arrival order.
  int32_t priority = 0;
  /// (token id, bias) pairs, each id at most once: the bias (-100 to 100, OpenAI's `logit_bias`) is added to that
  /// id's logit before the penalties and the rest, so -100 all but bans a token and 100 all but forces it. Reported
  /// logprobs stay those of the model's own distribution, as with penalties.
  std::vector<std::pair<int32_t, float>> logit_bias;

  /// Checks ranges (temperature >= 0, 0 < top_p <= 1, ...) against a vocabulary of `vocab_size` ids.
  PHOTON_API Status validate(int64_t vocab_size) const;
};

/// Log-probability of one token under a distribution, with that distribution's most likely tokens.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  ///< (id, logprob), most likely first; ties by lower id
};

}  // namespace photon
