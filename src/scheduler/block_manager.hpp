// BlockManager: which KV-cache blocks each request owns, with automatic prefix caching.
//
// Blocks hold `block_size` tokens. Each block has a reference count: requests sharing a cached prefix share its
// blocks. A full block of a request is registered under a chained hash of (its parent block's hash, its tokens), so
// a later request whose prompt starts with the same tokens reuses it instead of recomputing. Blocks no request
// references stay cached and sit in the free queue in LRU order (the least recently freed is reused first, and a
// request's tail blocks are freed before its head, so shared prefixes survive longest). A block with a non-zero
// reference count is never handed out.
//
// All operations are O(1) per block touched. Not thread-safe: the scheduler owns it and runs on one thread.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace photon {

class BlockManager {
 public:
  BlockManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  /// Blocks that can be handed out now (never used, or cached but unreferenced).
  int32_t num_free_blocks() const { return num_free_; }
  /// Fraction of blocks referenced by some request, 0..1.
  double usage() const { return 1.0 - static_cast<double>(num_free_) / static_cast<double>(blocks_.size()); }

  /// The longest run of cached full blocks that prefixes `tokens`, capped so at least one token is left to
  /// compute. Takes a reference on each block and appends them to `block_table`; returns the number of tokens they
  /// hold. `block_table` must be empty.
  int32_t acquire_cached_prefix(std::span<const int32_t> tokens, std::vector<int32_t>& block_table);

  /// Ensures `block_table` covers `num_tokens` tokens, allocating blocks as needed. Returns false, and changes
  /// nothing, when too few blocks are free.
  bool allocate(int32_t num_tokens, std::vector<int32_t>& block_table);

  /// Registers the full blocks among the first `num_computed` tokens that are not yet registered, starting from
  /// block `*num_hashed`; updates `*num_hashed`. No-op without prefix caching.
  void cache_full_blocks(std::span<const int32_t> tokens, int32_t num_computed, std::span<const int32_t> block_table,
                         int32_t* num_hashed, std::vector<uint64_t>& block_hashes);

  /// Drops one reference on each block of `block_table` (tail first) and clears it.
  void release(std::vector<int32_t>& block_table);

  /// Number of blocks with a positive reference count.
  int32_t num_referenced_blocks() const;
  /// Reference count of a block (for tests and invariant checks).
  int32_t ref_count(int32_t block) const { return blocks_[static_cast<size_t>(block)].ref_count; }

 private:
  static constexpr int32_t kNone = -1;
  struct Block {
    int32_t ref_count = 0;
    int32_t prev = kNone;  // free-queue links
    int32_t next = kNone;
    bool in_free_queue = false;
    bool hashed = false;
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
    std::vector<int32_t> tokens;  // the block's tokens when hashed, to confirm cache hits exactly
  };

  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens);
  void push_free_back(int32_t id);
  void push_free_front(int32_t id);
  void remove_free(int32_t id);
  int32_t pop_free_front();
  void evict_hash(int32_t id);

  int32_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  int32_t free_head_ = kNone;
  int32_t free_tail_ = kNone;
  int32_t num_free_ = 0;
  std::unordered_map<uint64_t, int32_t> cached_;  // chained hash -> block id
};

}  // namespace photon
