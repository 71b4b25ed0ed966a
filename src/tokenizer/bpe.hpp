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
  /// From a tokenizer.json "model" object. Errors name the offending merge or field. When `vocab_text` and
  /// `merges_text` are given they hold the raw JSON of those two members (read by a fast scanner; `model`'s own
  /// "vocab" and "merges" are then ignored).
  static Result<std::unique_ptr<BpeModel>> from_json(const nlohmann::json& model, std::string_view vocab_text = {},
                                                     std::string_view merges_text = {});

  /// Appends the ids of `word`. Thread-safe (a small internal cache is locked).
  void encode(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// The token string of `id`, or nullopt when the model has no such id.
  std::optional<std::string_view> id_to_token(int32_t id) const;
  /// One past the largest id of the vocabulary.
  int32_t vocab_size() const { return static_cast<int32_t>(id_offsets_.size()); }

 private:
  // The vocabulary as one arena of token bytes plus an open-addressing table (hash, offset, length, id): one or
  // two cache misses per lookup instead of a node-based map's three, which dominates loading 300k merges.
  struct VocabEntry {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t length = 0;
    int32_t id = -1;  // -1: empty
  };
  std::optional<int32_t> vocab_find(std::string_view token) const;
  bool vocab_insert(std::string_view token, int32_t id);
  std::string_view arena_view(uint32_t offset, uint32_t length) const { return {arena_.data() + offset, length}; }

  // Merges in an open-addressing table keyed by the (left id, right id) pair: about 300k of them are built at
  // load and probed constantly while encoding, where node-based maps are slow on both counts.
  struct MergeEntry {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t id = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static size_t slot_of(uint64_t key, size_t mask) {
    return static_cast<size_t>((key * 0x9e3779b97f4a7c15ull) >> 20) & mask;
  }
  void insert_merge(uint64_t key, int32_t rank, int32_t id);
  const MergeEntry* find_merge(int32_t a, int32_t b) const;
  Status add_merge(std::string_view a, std::string_view b, int32_t rank, std::string& scratch);
  void encode_uncached(std::string_view word, std::vector<int32_t>& out) const;

  std::string arena_;
  std::vector<VocabEntry> vocab_;
  size_t vocab_mask_ = 0;
  size_t vocab_count_ = 0;
  std::vector<std::pair<uint32_t, uint32_t>> id_offsets_;  // id -> (offset, length) in arena_; length ~0u: no token
  std::vector<MergeEntry> merges_;
  size_t merge_mask_ = 0;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  int32_t byte_ids_[256];  // <0xXX> tokens for byte fallback, -1 when absent

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace photon
