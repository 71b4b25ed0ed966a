// Parsing and validating the bodies of POST /v1/chat/completions and /v1/completions (OpenAI's request shapes, plus
// vLLM's sampling extensions top_k, min_p, repetition_penalty, ignore_eos, chat_template_kwargs). Pure functions:
// a body in, a request or an ApiError naming the field out.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
#include <photon/sampling.hpp>

#include "server/api_error.hpp"

namespace photon::server {

enum class Endpoint { kChat, kCompletion };

/// One generation request as the server runs it: `n` copies of one prompt with the same sampling parameters.
struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletion;
  std::string model;  ///< as the client named it ("" when absent)
  /// Chat: the messages and tools as sent (key order kept), and extra template variables (chat_template_kwargs).
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;  ///< array or null
  std::string tool_choice = "auto";
  nlohmann::ordered_json chat_template_kwargs;  ///< object or null
  /// Completions: the prompt as text, or as token ids.
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  bool echo = false;
  SamplingParams params;  ///< max_tokens 0 means "until the context is full" (filled in by the server)
  bool max_tokens_given = false;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage
  /// Logprobs per generated token: -1 none, else the number of alternatives (chat: top_logprobs; completions:
  /// logprobs).
  int logprobs = -1;
  std::string user;
};

/// Parses `body` for `endpoint`. Errors (400): malformed JSON, a field of the wrong type or out of range, missing
/// messages / prompt, unsupported values (n outside 1..16, best_of, a list of several prompts).
std::variant<GenerationRequest, ApiError> parse_generation_request(std::string_view body, Endpoint endpoint);

}  // namespace photon::server
