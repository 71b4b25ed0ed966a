#include "tokenizer/decoder.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.hpp"
#include "tokenizer/utf8.hpp"

namespace photon {
namespace {

using nlohmann::json;

Status bad(std::string_view message) {
  return Status(StatusCode::kFormatError, std::string("tokenizer.json: decoder: ").append(message));
}

// Byte-level tokens back to bytes; a token with characters outside the alphabet (an added token's text, say)
// stays as written. The pieces are raw bytes: the tokenizer repairs invalid UTF-8 once the whole text is joined.
class ByteLevelDecoder final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mapped;
      bool all = true;
      for (size_t i = 0; i < t.size() && all;) {
        const int b = byte_level::char_to_byte(utf8::decode(t, i));
        if (b < 0)
          all = false;
        else
          mapped.push_back(static_cast<char>(b));
      }
      bytes += all ? mapped : t;
    }
    tokens.assign(1, bytes);
  }
};

class ReplaceDecoder final : public TokenDecoder {
 public:
  ReplaceDecoder(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::string out;
      size_t pos = 0;
      while (!from_.empty()) {
        const size_t hit = t.find(from_, pos);
        if (hit == std::string::npos) break;
        out.append(t, pos, hit - pos);
        out += to_;
        pos = hit + from_.size();
      }
      out.append(t, pos);
      t = std::move(out);
    }
  }

 private:
  std::string from_, to_;
};

// Runs of "<0xAB>" tokens become the bytes they name (raw: invalid UTF-8 becomes U+FFFD per byte when the
// tokenizer repairs the joined text, as `tokenizers` does per run).
class ByteFallbackDecoder final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string run;
    size_t run_len = 0;
    auto flush = [&] {
      if (run_len == 0) return;
      out.push_back(run);
      run.clear();
      run_len = 0;
    };
    for (std::string& t : tokens) {
      if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>') {
        char* end = nullptr;
        const long v = std::strtol(t.c_str() + 3, &end, 16);
        if (end == t.c_str() + 5) {
          run.push_back(static_cast<char>(v));
          ++run_len;
          continue;
        }
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens.swap(out);
  }
};

class FuseDecoder final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, all);
  }
};

// Removes up to `start` leading and `stop` trailing occurrences of a character from each token.
class StripDecoder final : public TokenDecoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      for (size_t i = 0; i < start_ && t.starts_with(content_); ++i) t.erase(0, content_.size());
      for (size_t i = 0; i < stop_ && t.ends_with(content_); ++i) t.erase(t.size() - content_.size());
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class SequenceDecoder final : public TokenDecoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<TokenDecoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<TokenDecoder>> steps_;
};

}  // namespace

Result<std::unique_ptr<TokenDecoder>> make_token_decoder(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<TokenDecoder>();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return bad("expected an object with a string 'type'");
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "ByteLevel") return std::unique_ptr<TokenDecoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<TokenDecoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<TokenDecoder>(new FuseDecoder());
  if (type == "Replace") {
    const auto& pattern = spec.value("pattern", json());
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string() ||
        !spec.value("content", json()).is_string()) {
      return bad("Replace supports a {\"String\": ...} pattern and a string 'content'");
    }
    return std::unique_ptr<TokenDecoder>(
        new ReplaceDecoder(pattern["String"].get<std::string>(), spec["content"].get<std::string>()));
  }
  if (type == "Strip") {
    if (!spec.value("content", json()).is_string()) return bad("Strip needs a string 'content'");
    return std::unique_ptr<TokenDecoder>(new StripDecoder(
        spec["content"].get<std::string>(), spec.value("start", size_t{0}), spec.value("stop", size_t{0})));
  }
  if (type == "Sequence") {
    const auto& list = spec.value("decoders", json());
    if (!list.is_array()) return bad("Sequence needs an array 'decoders'");
    std::vector<std::unique_ptr<TokenDecoder>> steps;
    for (const auto& item : list) {
      PHOTON_ASSIGN_OR_RETURN(auto step, make_token_decoder(item));
      if (step) steps.push_back(std::move(step));
    }
    return std::unique_ptr<TokenDecoder>(new SequenceDecoder(std::move(steps)));
  }
  return Status(StatusCode::kUnsupported,
                fmt::format("tokenizer.json: decoder type '{}' is not supported (supported: ByteLevel, Replace, "
                            "ByteFallback, Fuse, Strip, Sequence)",
                            type));
}

}  // namespace photon
