#include "server/reasoning.hpp"

namespace photon::server {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

void ReasoningSplitter::emit(Delta& d, std::string_view text) {
  if (trim_next_) {
    const size_t first = text.find_first_not_of('\n');
    if (first == std::string_view::npos) return;  // still only newlines: keep trimming
    text.remove_prefix(first);
    trim_next_ = false;
  }
  (in_reasoning_ ? d.reasoning : d.content).append(text);
}

ReasoningSplitter::Delta ReasoningSplitter::feed(std::string_view text) {
  Delta d;
  pending_.append(text);
  for (;;) {
    const std::string_view tag = in_reasoning_ ? kClose : kOpen;
    const size_t at = pending_.find(tag);
    if (at == std::string::npos) break;
    emit(d, std::string_view(pending_).substr(0, at));
    pending_.erase(0, at + tag.size());
    in_reasoning_ = !in_reasoning_;
    trim_next_ = true;
  }
  const size_t keep = partial_tag(pending_, in_reasoning_ ? kClose : kOpen);
  emit(d, std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return d;
}

ReasoningSplitter::Delta ReasoningSplitter::finish() {
  Delta d;
  emit(d, pending_);
  pending_.clear();
  return d;
}

}  // namespace photon::server
