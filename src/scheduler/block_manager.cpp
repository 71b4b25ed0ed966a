#include "scheduler/block_manager.hpp"

#include <algorithm>
#include <cassert>

namespace photon {

BlockManager::BlockManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching), blocks_(static_cast<size_t>(num_blocks)) {
  for (int32_t i = 0; i < num_blocks; ++i) push_free_back(i);
}

uint64_t BlockManager::chain_hash(uint64_t parent, std::span<const int32_t> tokens) {
  // 64-bit mixing of the parent's hash and each token (splitmix64 finaliser per word). Hits are confirmed against
  // the stored tokens, so a collision can only cost a cache miss, never a wrong answer.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(parent + 0x9e3779b97f4a7c15ull);
  for (int32_t t : tokens) h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ull));
  return h;
}

void BlockManager::push_free_back(int32_t id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  assert(!b.in_free_queue && b.ref_count == 0);
  b.prev = free_tail_;
  b.next = kNone;
  if (free_tail_ != kNone) blocks_[static_cast<size_t>(free_tail_)].next = id;
  free_tail_ = id;
  if (free_head_ == kNone) free_head_ = id;
  b.in_free_queue = true;
  ++num_free_;
}

void BlockManager::push_free_front(int32_t id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  assert(!b.in_free_queue && b.ref_count == 0);
  b.prev = kNone;
  b.next = free_head_;
  if (free_head_ != kNone) blocks_[static_cast<size_t>(free_head_)].prev = id;
  free_head_ = id;
  if (free_tail_ == kNone) free_tail_ = id;
  b.in_free_queue = true;
  ++num_free_;
}

void BlockManager::remove_free(int32_t id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  assert(b.in_free_queue);
  if (b.prev != kNone)
    blocks_[static_cast<size_t>(b.prev)].next = b.next;
  else
    free_head_ = b.next;
  if (b.next != kNone)
    blocks_[static_cast<size_t>(b.next)].prev = b.prev;
  else
    free_tail_ = b.prev;
  b.prev = b.next = kNone;
  b.in_free_queue = false;
  --num_free_;
}

int32_t BlockManager::pop_free_front() {
  const int32_t id = free_head_;
  assert(id != kNone);
  remove_free(id);
  evict_hash(id);
  return id;
}

void BlockManager::evict_hash(int32_t id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  if (!b.hashed) return;
  const auto it = cached_.find(b.hash);
  if (it != cached_.end() && it->second == id) cached_.erase(it);
  b.hashed = false;
  b.tokens.clear();
}

int32_t BlockManager::acquire_cached_prefix(std::span<const int32_t> tokens, std::vector<int32_t>& block_table) {
  assert(block_table.empty());
  if (!prefix_caching_ || tokens.empty()) return 0;
  // At least one token must be computed to produce logits, so a fully cached prompt leaves its last block out.
  const auto max_blocks = static_cast<int32_t>((tokens.size() - 1) / static_cast<size_t>(block_size_));
  uint64_t parent = 0;
  for (int32_t i = 0; i < max_blocks; ++i) {
    const auto chunk =
        tokens.subspan(static_cast<size_t>(i) * static_cast<size_t>(block_size_), static_cast<size_t>(block_size_));
    const uint64_t h = chain_hash(parent, chunk);
    const auto it = cached_.find(h);
    if (it == cached_.end()) break;
    Block& b = blocks_[static_cast<size_t>(it->second)];
    if (b.parent_hash != parent || !std::equal(chunk.begin(), chunk.end(), b.tokens.begin(), b.tokens.end())) break;
    if (b.in_free_queue) remove_free(it->second);
    ++b.ref_count;
    block_table.push_back(it->second);
    parent = h;
  }
  return static_cast<int32_t>(block_table.size()) * block_size_;
}

bool BlockManager::allocate(int32_t num_tokens, std::vector<int32_t>& block_table) {
  const int32_t needed = (num_tokens + block_size_ - 1) / block_size_ - static_cast<int32_t>(block_table.size());
  if (needed <= 0) return true;
  if (needed > num_free_) return false;
  for (int32_t i = 0; i < needed; ++i) {
    const int32_t id = pop_free_front();
    blocks_[static_cast<size_t>(id)].ref_count = 1;
    block_table.push_back(id);
  }
  return true;
}

void BlockManager::cache_full_blocks(std::span<const int32_t> tokens, int32_t num_computed,
                                     std::span<const int32_t> block_table, int32_t* num_hashed,
                                     std::vector<uint64_t>& block_hashes) {
  if (!prefix_caching_) return;
  const int32_t full = std::min(num_computed / block_size_, static_cast<int32_t>(block_table.size()));
  for (int32_t i = *num_hashed; i < full; ++i) {
    const uint64_t parent = i == 0 ? 0 : block_hashes[static_cast<size_t>(i - 1)];
    const auto chunk =
        tokens.subspan(static_cast<size_t>(i) * static_cast<size_t>(block_size_), static_cast<size_t>(block_size_));
    const uint64_t h = chain_hash(parent, chunk);
    block_hashes.push_back(h);
    const int32_t id = block_table[static_cast<size_t>(i)];
    Block& b = blocks_[static_cast<size_t>(id)];
    if (!b.hashed && !cached_.contains(h)) {  // the first block with these contents becomes the cached copy
      b.hashed = true;
      b.hash = h;
      b.parent_hash = parent;
      b.tokens.assign(chunk.begin(), chunk.end());
      cached_.emplace(h, id);
    }
  }
  *num_hashed = std::max(*num_hashed, full);
}

void BlockManager::release(std::vector<int32_t>& block_table) {
  for (auto it = block_table.rbegin(); it != block_table.rend(); ++it) {
    Block& b = blocks_[static_cast<size_t>(*it)];
    assert(b.ref_count > 0);
    if (--b.ref_count == 0) {
      if (b.hashed) {
        push_free_back(*it);
      } else {
        push_free_front(*it);  // nothing worth keeping: reuse these first
      }
    }
  }
  block_table.clear();
}

int32_t BlockManager::num_referenced_blocks() const {
  return static_cast<int32_t>(
      std::count_if(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.ref_count > 0; }));
}

}  // namespace photon
