// Normalizers of tokenizer.json: none, NFC / NFD / NFKC / NFKD (through utf8proc), Lowercase, Replace, Prepend
// and Sequence of those.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <photon/status.hpp>

namespace photon {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};

/// Builds the normalizer described by a tokenizer.json "normalizer" value (null gives nullptr: no normalization).
Result<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& spec);

}  // namespace photon
