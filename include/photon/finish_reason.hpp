// PhotonInfer — why a request ended.
//
// A plain enum and its OpenAI spelling, in a header of its own so that code that only tracks requests (the
// scheduler, bindings) needs nothing else of the engine's API.
#pragma once

#include <cstdint>

#include <photon/export.hpp>

namespace photon {

/// Why a request ended.
enum class FinishReason : uint8_t {
  kNone = 0,   ///< still running
  kStop,       ///< EOS, a stop token id or a stop string
  kLength,     ///< max_tokens or max_model_len reached
  kCancelled,  ///< Engine::cancel was called
  kError,      ///< the request failed; RequestEvent::error says why
};

/// "stop", "length", "cancelled", "error" (or "" for kNone): the OpenAI spellings where they exist. Static storage;
/// thread-safe.
PHOTON_API const char* finish_reason_name(FinishReason reason);

}  // namespace photon
