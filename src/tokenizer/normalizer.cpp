#include "tokenizer/normalizer.hpp"

#include <cstdlib>

#include <fmt/format.h>
#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include "tokenizer/utf8.hpp"

namespace photon {
namespace {

using nlohmann::json;

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  std::string normalize(std::string_view text) const override {
    // Fast path: ASCII is invariant under every normalization form.
    bool ascii = true;
    for (char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
    if (ascii) return std::string(text);
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                     &out, static_cast<utf8proc_option_t>(options_));
    if (n < 0) return std::string(text);  // input is repaired to valid UTF-8 first, so this is not expected
    std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
    std::free(out);
    return result;
  }

 private:
  int options_;
};

class Lowercase final : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();)
      utf8::append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(utf8::decode(text, i)))));
    return out;
  }
};

class Replace final : public Normalizer {
 public:
  Replace(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::string normalize(std::string_view text) const override {
    std::string out;
    size_t pos = 0;
    while (true) {
      const size_t hit = text.find(from_, pos);
      if (hit == std::string_view::npos || from_.empty()) break;
      out.append(text.substr(pos, hit - pos));
      out += to_;
      pos = hit + from_.size();
    }
    out.append(text.substr(pos));
    return out;
  }

 private:
  std::string from_, to_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override {
    return text.empty() ? std::string() : prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& step : steps_) s = step->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

Status bad(std::string_view message) {
  return Status(StatusCode::kFormatError, std::string("tokenizer.json: normalizer: ").append(message));
}

}  // namespace

Result<std::unique_ptr<Normalizer>> make_normalizer(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<Normalizer>();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return bad("expected an object with a string 'type'");
  }
  const std::string type = spec["type"].get<std::string>();
  const int stable = UTF8PROC_STABLE;
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeForm(stable | UTF8PROC_COMPOSE));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeForm(stable | UTF8PROC_DECOMPOSE));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeForm(stable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (type == "NFKD") {
    return std::unique_ptr<Normalizer>(new UnicodeForm(stable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new Lowercase());
  if (type == "Replace") {
    const auto& pattern = spec.value("pattern", json());
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string() ||
        !spec.value("content", json()).is_string()) {
      return bad("Replace supports a {\"String\": ...} pattern and a string 'content'");
    }
    return std::unique_ptr<Normalizer>(
        new Replace(pattern["String"].get<std::string>(), spec["content"].get<std::string>()));
  }
  if (type == "Prepend") {
    if (!spec.value("prepend", json()).is_string()) return bad("Prepend needs a string 'prepend'");
    return std::unique_ptr<Normalizer>(new Prepend(spec["prepend"].get<std::string>()));
  }
  if (type == "Sequence") {
    const auto& list = spec.value("normalizers", json());
    if (!list.is_array()) return bad("Sequence needs an array 'normalizers'");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& item : list) {
      PHOTON_ASSIGN_OR_RETURN(auto step, make_normalizer(item));
      if (step) steps.push_back(std::move(step));
    }
    return std::unique_ptr<Normalizer>(new Sequence(std::move(steps)));
  }
  return Status(StatusCode::kUnsupported,
                fmt::format("tokenizer.json: normalizer type '{}' is not supported (supported: NFC, NFD, NFKC, NFKD, "
                            "Lowercase, Replace, Prepend, Sequence)",
                            type));
}

}  // namespace photon
