#include "tokenizer/pre_tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.hpp"

namespace photon {
namespace {

using nlohmann::json;

// GPT-2's pattern, used by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Status bad(std::string_view message) {
  return Status(StatusCode::kFormatError, std::string("tokenizer.json: pre_tokenizer: ").append(message));
}

// A compiled regex plus per-thread match resources.
class Regex {
 public:
  static Result<std::shared_ptr<Regex>> compile(const std::string& pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return bad(fmt::format("regex /{}/ does not compile at offset {}: {}", pattern, offset,
                             reinterpret_cast<const char*>(message)));
    }
    const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return std::shared_ptr<Regex>(new Regex(code, jit));
  }
  ~Regex() { pcre2_code_free(code_); }

  /// Calls f(begin, end) for each successive match in `text` (byte offsets).
  template <typename F>
  void for_each_match(std::string_view text, F&& f) const {
    // Per-thread match state, freed when the thread ends (server threads come and go).
    struct MatchState {
      pcre2_match_data* data = pcre2_match_data_create(8, nullptr);
      pcre2_jit_stack* stack = pcre2_jit_stack_create(size_t{32} * 1024, size_t{8} * 1024 * 1024, nullptr);
      pcre2_match_context* context = pcre2_match_context_create(nullptr);
      MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
      ~MatchState() {
        pcre2_match_context_free(context);
        pcre2_jit_stack_free(stack);
        pcre2_match_data_free(data);
      }
    };
    thread_local MatchState state;
    pcre2_match_data* data = state.data;
    pcre2_match_context* context = state.context;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    PCRE2_SIZE start = 0;
    while (start < text.size()) {
      // Input is valid UTF-8 by construction (the tokenizer repairs it first).
      const int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data, context)
                          : pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data, context);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
      size_t begin = ov[0], end = ov[1];
      if (end == begin) {  // empty match: step one character forward
        size_t next = begin + 1;
        while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xc0) == 0x80) ++next;
        start = next;
        continue;
      }
      f(begin, end);
      start = end;
    }
  }

 private:
  Regex(pcre2_code* code, bool jit) : code_(code), jit_(jit) {}
  pcre2_code* code_;
  bool jit_;
};

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

class Split final : public PreTokenizer {
 public:
  Split(std::shared_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  void apply(std::vector<std::string>& words) const override {
    std::vector<std::string> out;
    out.reserve(words.size() * 4);
    for (const std::string& w : words) split(w, out);
    words.swap(out);
  }

 private:
  void split(const std::string& text, std::vector<std::string>& out) const {
    // Pieces as (begin, end, is_match); with invert the roles of matches and gaps swap.
    struct Piece {
      size_t begin, end;
      bool match;
    };
    std::vector<Piece> pieces;
    size_t last = 0;
    regex_->for_each_match(text, [&](size_t b, size_t e) {
      if (b > last) pieces.push_back({last, b, invert_});
      pieces.push_back({b, e, !invert_});
      last = e;
    });
    if (last < text.size()) pieces.push_back({last, text.size(), invert_});
    const std::string_view t(text);
    switch (behavior_) {
      case SplitBehavior::kIsolated:
        for (const Piece& p : pieces) out.emplace_back(t.substr(p.begin, p.end - p.begin));
        break;
      case SplitBehavior::kRemoved:
        for (const Piece& p : pieces) {
          if (!p.match) out.emplace_back(t.substr(p.begin, p.end - p.begin));
        }
        break;
      case SplitBehavior::kMergedWithPrevious: {  // each match ends the piece before it
        std::string cur;
        for (const Piece& p : pieces) {
          cur.append(t.substr(p.begin, p.end - p.begin));
          if (p.match) {
            out.push_back(std::move(cur));
            cur.clear();
          }
        }
        if (!cur.empty()) out.push_back(std::move(cur));
        break;
      }
      case SplitBehavior::kMergedWithNext: {
        std::string cur;
        for (const Piece& p : pieces) {
          if (p.match && !cur.empty()) {
            out.push_back(std::move(cur));
            cur.clear();
          }
          cur.append(t.substr(p.begin, p.end - p.begin));
        }
        if (!cur.empty()) out.push_back(std::move(cur));
        break;
      }
      case SplitBehavior::kContiguous: {
        std::string cur;
        bool cur_match = false;
        for (const Piece& p : pieces) {
          if (!cur.empty() && !(p.match && cur_match)) {
            out.push_back(std::move(cur));
            cur.clear();
          }
          cur.append(t.substr(p.begin, p.end - p.begin));
          cur_match = p.match;
        }
        if (!cur.empty()) out.push_back(std::move(cur));
        break;
      }
    }
  }

  std::shared_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, std::shared_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  void apply(std::vector<std::string>& words) const override {
    std::vector<std::string> out;
    out.reserve(words.size());
    for (std::string& w : words) {
      if (add_prefix_space_ && !w.empty() && w[0] != ' ') w.insert(w.begin(), ' ');
      if (regex_) {
        regex_->for_each_match(
            w, [&](size_t b, size_t e) { out.push_back(byte_level::encode(std::string_view(w).substr(b, e - b))); });
      } else {
        out.push_back(byte_level::encode(w));
      }
    }
    words.swap(out);
  }

 private:
  bool add_prefix_space_;
  std::shared_ptr<Regex> regex_;  // null: use_regex false
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void apply(std::vector<std::string>& words) const override {
    for (const auto& s : steps_) s->apply(words);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<PreTokenizer>();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return bad("expected an object with a string 'type'");
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "Split") {
    const auto& pattern = spec.value("pattern", json());
    std::string regex;
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      regex = pattern["Regex"].get<std::string>();
    } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      // A literal: quote it for the regex engine.
      regex = "\\Q" + pattern["String"].get<std::string>() + "\\E";
    } else {
      return bad("Split needs a pattern {\"Regex\": ...} or {\"String\": ...}");
    }
    const std::string behavior = spec.value("behavior", std::string("Isolated"));
    SplitBehavior b{};
    if (behavior == "Isolated") {
      b = SplitBehavior::kIsolated;
    } else if (behavior == "Removed") {
      b = SplitBehavior::kRemoved;
    } else if (behavior == "MergedWithPrevious") {
      b = SplitBehavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      b = SplitBehavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      b = SplitBehavior::kContiguous;
    } else {
      return bad(fmt::format("Split behavior '{}' is unknown", behavior));
    }
    PHOTON_ASSIGN_OR_RETURN(auto compiled, Regex::compile(regex));
    return std::unique_ptr<PreTokenizer>(new Split(std::move(compiled), b, spec.value("invert", false)));
  }
  if (type == "ByteLevel") {
    std::shared_ptr<Regex> regex;
    if (spec.value("use_regex", true)) {
      PHOTON_ASSIGN_OR_RETURN(regex, Regex::compile(kGpt2Pattern));
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevel(spec.value("add_prefix_space", false), std::move(regex)));
  }
  if (type == "Sequence") {
    const auto& list = spec.value("pretokenizers", json());
    if (!list.is_array()) return bad("Sequence needs an array 'pretokenizers'");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& item : list) {
      PHOTON_ASSIGN_OR_RETURN(auto step, make_pre_tokenizer(item));
      if (step) steps.push_back(std::move(step));
    }
    return std::unique_ptr<PreTokenizer>(new Sequence(std::move(steps)));
  }
  return Status(StatusCode::kUnsupported,
                fmt::format("tokenizer.json: pre-tokenizer type '{}' is not supported (supported: Split, ByteLevel, "
                            "Sequence)",
                            type));
}

}  // namespace photon
