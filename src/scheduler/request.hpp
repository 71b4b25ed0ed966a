// Request: one generation request's state as the scheduler tracks it.
#pragma once

#include <cstdint>
#include <vector>

#include <photon/finish_reason.hpp>
#include <photon/sampling.hpp>

namespace photon {

enum class RequestState : uint8_t { kWaiting, kRunning, kPreempted, kFinished };

struct Request {
  uint64_t id = 0;
  uint64_t arrival = 0;  ///< submission order, for FCFS among equal priorities
  SamplingParams params;
  uint64_t seed = 0;  ///< the request's random stream (params.seed or derived)
  int32_t num_prompt_tokens = 0;
  std::vector<int32_t> tokens;  ///< prompt followed by generated tokens
  RequestState state = RequestState::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;

  int32_t num_computed_tokens = 0;  ///< tokens whose K/V are in the cache
  std::vector<int32_t> block_table;
  int32_t num_hashed_blocks = 0;         ///< leading full blocks registered with the prefix cache
  std::vector<uint64_t> block_hashes;    ///< chained hash of each registered block
  int32_t num_cached_prompt_tokens = 0;  ///< prompt tokens served by the prefix cache at first admission
  int32_t next_prompt_logprob = 1;       ///< next prompt position whose logprob is to be reported (0 has none)
  int32_t num_preemptions = 0;
  double arrival_time = 0.0;  ///< engine clock, seconds
  double first_token_time = 0.0;

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool is_finished() const { return state == RequestState::kFinished; }
  /// Prompt logprobs are wanted for positions not yet reported.
  bool wants_prompt_logprobs() const {
    return params.prompt_logprobs.has_value() && next_prompt_logprob < num_prompt_tokens;
  }
};

}  // namespace photon
