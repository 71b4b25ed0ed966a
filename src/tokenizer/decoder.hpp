// Decoders of tokenizer.json: ByteLevel, Replace, ByteFallback, Fuse, Strip, and Sequence of those. A decoder
// turns the token strings of a sequence of ids back into pieces of raw bytes that are concatenated (and then made
// valid UTF-8 by the caller).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <photon/status.hpp>

namespace photon {

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  /// Rewrites the token strings in place (their count may change).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

/// Builds the decoder of a tokenizer.json "decoder" value (null gives nullptr: tokens are concatenated as-is).
Result<std::unique_ptr<TokenDecoder>> make_token_decoder(const nlohmann::json& spec);

}  // namespace photon
