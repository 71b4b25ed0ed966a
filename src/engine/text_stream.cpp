#include "engine/text_stream.hpp"

#include <algorithm>

#include "tokenizer/utf8.hpp"

namespace photon {

TextStream::TextStream(const Tokenizer& tokenizer, std::span<const int32_t> prompt, std::vector<std::string> stop)
    : detokenizer_(tokenizer, prompt, /*skip_special_tokens=*/true), stop_(std::move(stop)) {}

std::string TextStream::release(std::string_view text, bool* stopped) {
  held_ += text;
  if (stop_.empty()) return std::exchange(held_, {});
  // The earliest complete stop string ends the text.
  size_t first = std::string::npos;
  for (const auto& s : stop_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    done_ = true;
    *stopped = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stop_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > hold; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  // Never split a character while holding back.
  size_t emit = held_.size() - hold;
  emit = utf8::complete_prefix(std::string_view(held_).substr(0, emit));
  std::string out = held_.substr(0, emit);
  held_.erase(0, emit);
  return out;
}

std::string TextStream::push(int32_t id, bool* stopped) {
  *stopped = false;
  if (done_) return {};
  return release(detokenizer_.push(id), stopped);
}

std::string TextStream::finish() {
  if (done_) return {};
  bool stopped = false;
  std::string out = release(detokenizer_.finish(), &stopped);
  if (!stopped) out += std::exchange(held_, {});
  done_ = true;
  return out;
}

}  // namespace photon
