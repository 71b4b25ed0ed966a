// Separates a reasoning model's thinking from its answer in streamed text: Qwen3 writes "<think>...</think>" before
// the answer, and OpenAI-compatible servers return the inside as `reasoning_content`. Text arrives in arbitrary
// pieces, so a piece that may be the start of a tag is held back until the next one decides it.
#pragma once

#include <string>
#include <string_view>

namespace photon::server {

class ReasoningSplitter {
 public:
  /// `in_reasoning`: the prompt already opened the thinking block (its generation prompt ends with "<think>").
  explicit ReasoningSplitter(bool in_reasoning = false) : in_reasoning_(in_reasoning) {}

  struct Delta {
    std::string reasoning;
    std::string content;
  };
  /// The next piece of generated text, split; text that may begin a tag stays buffered.
  Delta feed(std::string_view text);
  /// Whatever is still buffered (the stream ended).
  Delta finish();

 private:
  void emit(Delta& d, std::string_view text);
  bool in_reasoning_;
  bool trim_next_ = false;  // newlines right after a tag belong to neither part
  std::string pending_;
};

}  // namespace photon::server
