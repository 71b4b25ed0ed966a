#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <photon/sampling.hpp>

#include "core/sample_request.hpp"

namespace photon {

Status SamplingParams::validate(int64_t vocab_size) const {
  auto bad = [](std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); };
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return bad(fmt::format("temperature must be >= 0 (0 is greedy), not {}", temperature));
  }
  if (top_k < -1) return bad(fmt::format("top_k must be -1, 0 (both disable it) or positive, not {}", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad(fmt::format("top_p must be in (0, 1], not {}", top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad(fmt::format("min_p must be in [0, 1], not {}", min_p));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return bad(fmt::format("repetition_penalty must be > 0 (1 disables it), not {}", repetition_penalty));
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return bad(fmt::format("presence_penalty must be in [-2, 2], not {}", presence_penalty));
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return bad(fmt::format("frequency_penalty must be in [-2, 2], not {}", frequency_penalty));
  }
  if (max_tokens < 1) return bad(fmt::format("max_tokens must be at least 1, not {}", max_tokens));
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return bad(fmt::format("stop token id {} is outside the vocabulary (0..{})", id, vocab_size - 1));
    }
  }
  for (const auto& s : stop) {
    if (s.empty()) return bad("stop strings must not be empty");
  }
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxTopLogprobs)) {
    return bad(fmt::format("logprobs must be from 0 to {}, not {}", kMaxTopLogprobs, *logprobs));
  }
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > kMaxTopLogprobs)) {
    return bad(fmt::format("prompt_logprobs must be from 0 to {}, not {}", kMaxTopLogprobs, *prompt_logprobs));
  }
  std::vector<int32_t> biased;
  biased.reserve(logit_bias.size());
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return bad(fmt::format("logit_bias names token id {}, outside the vocabulary (0..{})", id, vocab_size - 1));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return bad(fmt::format("logit_bias of token {} must be from -100 to 100, not {}", id, bias));
    }
    biased.push_back(id);
  }
  std::sort(biased.begin(), biased.end());
  if (const auto twice = std::adjacent_find(biased.begin(), biased.end()); twice != biased.end()) {
    return bad(fmt::format("logit_bias names token id {} twice", *twice));
  }
  return Status::ok();
}

}  // namespace photon
