// What the sampler is told about each row of logits: one layout for the host (engine, CPU backend) and the GPU
// kernels, which read these structs as uploaded. Plain data, so .cu files include it too.
#pragma once

#include <cstdint>

#include "core/random.hpp"  // PHOTON_HOST_DEVICE

namespace photon {

/// One row of logits to turn into a token (see Backend::sample). Its adjustments come first, in place on the row,
/// over the request's entries of the adjustment list (LogitAdjustment: the logit bias, then the penalties); then the
/// selection.
struct SampleRequest {
  int32_t row = 0;           ///< row of the logits tensor
  float temperature = 0.0f;  ///< 0: argmax (lowest id on ties); else Gumbel-max over logits / temperature
  int32_t top_k = 0;         ///< keep the top_k most likely tokens (0: all)
  float top_p = 1.0f;        ///< then the smallest set of most likely tokens whose probability reaches top_p
  float min_p = 0.0f;        ///< then the tokens with probability >= min_p * the top token's
  /// >= 0: the chosen token's log-probability and this many top tokens are wanted too (Backend::sampled_logprobs),
  /// computed from the model's row: before the adjustments, as OpenAI's API and vLLM report them; -1: none.
  int32_t logprobs = -1;
  uint64_t seed = 0;                ///< the request's random stream
  uint64_t index = 0;               ///< which draw of that stream (the output position)
  float repetition_penalty = 1.0f;  ///< tokens of the prompt and output: logit / p when positive, else logit * p
  float presence_penalty = 0.0f;    ///< then, for tokens the output holds: minus presence + frequency * count
  float frequency_penalty = 0.0f;
  int32_t adjustment_begin = 0;  ///< the request's entries of the adjustment list: [begin, begin + count)
  int32_t adjustment_count = 0;
  int32_t reserved2 = 0;
};

/// Whether a request draws with top-p as its only cut of the order (temperature > 0, top_p < 1, no top-k short of the
/// vocabulary): the GPU sampler's faster path, chosen on the host and checked again in the kernel.
PHOTON_HOST_DEVICE inline bool top_p_alone(const SampleRequest& r, int vocab) {
  return r.temperature > 0.0f && r.top_p < 1.0f && !(r.top_k > 0 && r.top_k < vocab);
}

/// A token whose logit a request adjusts before the selection: each distinct token of its prompt, its output and its
/// logit bias once. Its logit becomes logit + bias; then, when the prompt or output holds the token, the repetition
/// penalty divides it (positive) or multiplies it (negative); then presence + frequency * output_count is subtracted
/// when output_count > 0.
struct LogitAdjustment {
  int32_t token = 0;
  int32_t output_count = 0;  ///< times the output holds the token
  float bias = 0.0f;         ///< the request's logit bias for it (0: none)
  int32_t in_context = 0;    ///< 1 when the prompt or the output holds it (the repetition penalty applies), else 0
};

/// The most top tokens a logprob query returns with its own (Backend::token_logprobs; the API's limit, as vLLM's).
constexpr int kMaxTopLogprobs = 20;

/// A token whose log-probability is wanted (Backend::token_logprobs): row `row` of the logits predicts it.
struct LogprobQuery {
  int32_t row = 0;
  int32_t token = 0;
};

}  // namespace photon
