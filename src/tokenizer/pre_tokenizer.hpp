// Pre-tokenizers of tokenizer.json: Split (the file's own regex, compiled by PCRE2 with UTF and Unicode
// properties, JIT-compiled), ByteLevel, and Sequence of those. A pre-tokenizer cuts normalized text into the words
// the model encodes separately, and may rewrite them (ByteLevel maps bytes to its printable alphabet).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <photon/status.hpp>

namespace photon {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Replaces every word of `words` by the words it splits into (in order). Thread-safe.
  virtual void apply(std::vector<std::string>& words) const = 0;
};

/// Builds the pre-tokenizer of a tokenizer.json "pre_tokenizer" value (null gives nullptr: the text is one word).
Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& spec);

}  // namespace photon
