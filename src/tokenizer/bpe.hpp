// The BPE model of tokenizer.json: a vocabulary, ranked merges (written "a b" or ["a", "b"]), ignore_merges,
// byte fallback and an unknown token. Encodes one pre-tokenized word into ids.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <photon/status.hpp>

namespace photon {

class BpeModel {
 public:
  /// From a tokenizer.json "model" object. Errors name the offending merge or field.
  static Result<std::unique_ptr<BpeModel>> from_json(const nlohmann::json& model);

  /// Appends the ids of `word`. Thread-safe (a small internal cache is locked).
  void encode(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// The token string of `id`, or nullptr when the model has no such id.
  const std::string* id_to_token(int32_t id) const;
  /// One past the largest id of the vocabulary.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void encode_uncached(std::string_view word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  int32_t byte_ids_[256];  // <0xXX> tokens for byte fallback, -1 when absent

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace photon
