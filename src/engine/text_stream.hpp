// TextStream: one request's generated ids turned into UTF-8-safe text deltas, with stop strings. Text that could
// still become the start of a stop string is held back until it is decided, so a stop string (and what follows
// it) never reaches the caller.
#pragma once

#include <string>
#include <vector>

#include <photon/tokenizer.hpp>

namespace photon {

class TextStream {
 public:
  /// `tokenizer` must outlive the stream. Special tokens are left out of the text (as vLLM does by default).
  TextStream(const Tokenizer& tokenizer, std::span<const int32_t> prompt, std::vector<std::string> stop);

  /// Adds a generated id; returns the text now safe to emit. Sets *stopped when a stop string completed (the
  /// returned text ends just before it; later calls return nothing).
  std::string push(int32_t id, bool* stopped);
  /// Flushes what is held back (at the end of a request that did not stop on a stop string).
  std::string finish();

 private:
  std::string release(std::string_view text, bool* stopped);

  StreamingDetokenizer detokenizer_;
  std::vector<std::string> stop_;
  std::string held_;
  bool done_ = false;
};

}  // namespace photon
