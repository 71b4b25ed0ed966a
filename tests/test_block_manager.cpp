// BlockManager: allocation, reference counts, prefix-cache hits and LRU eviction.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "scheduler/block_manager.hpp"

using namespace photon;

namespace {

std::vector<int32_t> seq(int32_t n, int32_t start = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Runs a request's whole life: allocate, compute everything, register its full blocks.
std::vector<int32_t> fill(BlockManager& bm, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> table;
  REQUIRE(bm.allocate(static_cast<int32_t>(tokens.size()), table));
  int32_t hashed = 0;
  std::vector<uint64_t> hashes;
  bm.cache_full_blocks(tokens, static_cast<int32_t>(tokens.size()), table, &hashed, hashes);
  return table;
}

}  // namespace

TEST_CASE("allocation is all or nothing and release returns every block") {
  BlockManager bm(8, 4, false);
  std::vector<int32_t> a, b;
  CHECK(bm.allocate(10, a));  // 3 blocks
  CHECK(a.size() == 3);
  CHECK(bm.num_free_blocks() == 5);
  CHECK(bm.allocate(12, a));  // still 3
  CHECK(a.size() == 3);
  CHECK_FALSE(bm.allocate(24, b));  // 6 > 5 free
  CHECK(b.empty());
  CHECK(bm.num_free_blocks() == 5);
  CHECK(bm.allocate(20, b));
  CHECK(bm.num_free_blocks() == 0);
  std::set<int32_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  CHECK(all.size() == 8);  // no block handed out twice
  bm.release(a);
  bm.release(b);
  CHECK(a.empty());
  CHECK(bm.num_free_blocks() == 8);
  CHECK(bm.num_referenced_blocks() == 0);
}

TEST_CASE("a shared prompt prefix is served from cached blocks") {
  BlockManager bm(16, 4, true);
  const auto prompt = seq(10);  // two full blocks + 2 tokens
  auto a = fill(bm, prompt);
  std::vector<int32_t> b;
  auto other = seq(10);
  other[9] = 7;  // same first 8 tokens
  CHECK(bm.acquire_cached_prefix(other, b) == 8);
  REQUIRE(b.size() == 2);
  CHECK(b[0] == a[0]);
  CHECK(b[1] == a[1]);
  CHECK(bm.ref_count(a[0]) == 2);
  // A different first block hits nothing, even if later blocks match.
  std::vector<int32_t> c;
  auto shifted = prompt;
  shifted[0] = 1;
  CHECK(bm.acquire_cached_prefix(shifted, c) == 0);
  // A fully cached prompt leaves its last block to compute, so there are logits to sample from.
  std::vector<int32_t> d;
  CHECK(bm.acquire_cached_prefix(seq(8), d) == 4);
  bm.release(a);
  bm.release(b);
  bm.release(d);
  // Unreferenced cached blocks still hit, and count as free.
  CHECK(bm.num_free_blocks() == 16);
  std::vector<int32_t> e;
  CHECK(bm.acquire_cached_prefix(prompt, e) == 8);
  CHECK(bm.num_free_blocks() == 14);
  bm.release(e);
}

TEST_CASE("without prefix caching nothing is shared") {
  BlockManager bm(8, 4, false);
  auto a = fill(bm, seq(9));
  std::vector<int32_t> b;
  CHECK(bm.acquire_cached_prefix(seq(9), b) == 0);
  bm.release(a);
}

TEST_CASE("cached blocks are evicted least recently freed first, never while referenced") {
  BlockManager bm(4, 2, true);
  auto a = fill(bm, seq(4, 10));  // blocks for [10,11] [12,13]
  auto b = fill(bm, seq(4, 20));
  bm.release(a);  // a's blocks become evictable (tail first)
  std::vector<int32_t> keep;
  CHECK(bm.acquire_cached_prefix(seq(5, 20), keep) == 4);  // b's blocks, still referenced by b
  bm.release(b);
  // Two fresh blocks must come from a's (evicted), not from b's (referenced by `keep`).
  std::vector<int32_t> fresh;
  REQUIRE(bm.allocate(4, fresh));
  for (int32_t id : fresh) CHECK(std::find(keep.begin(), keep.end(), id) == keep.end());
  std::vector<int32_t> probe;
  CHECK(bm.acquire_cached_prefix(seq(5, 10), probe) == 0);  // a's contents are gone
  CHECK_FALSE(bm.allocate(2, probe));                       // and nothing is left
  bm.release(fresh);
  bm.release(keep);
  CHECK(bm.num_free_blocks() == 4);
  CHECK(bm.acquire_cached_prefix(seq(5, 20), probe) == 4);  // b's survived
  bm.release(probe);
}
