// The paged KV cache's memory: one tensor per layer of [num_blocks, 2, kv_heads, block_size, head_dim] on the
// backend's device, allocated once. The block manager decides which block ids a sequence owns; this class only
// holds the bytes.
#pragma once

#include <vector>

#include "core/backend.hpp"
#include "models/model_config.hpp"

namespace photon {

class PagedKvCache {
 public:
  /// Bytes one block takes across all layers.
  static uint64_t bytes_per_block(const ModelConfig& config, int64_t block_size, DType dtype);
  /// Allocates `num_blocks` blocks of `block_size` tokens in `dtype` (f32 or bf16 on the CPU).
  static Result<PagedKvCache> create(const ModelConfig& config, Backend& backend, int64_t num_blocks,
                                     int64_t block_size, DType dtype);

  const KvCacheLayout& layout() const { return layout_; }
  Tensor& layer(int64_t i) { return layers_[static_cast<size_t>(i)]; }
  int64_t num_blocks() const { return layout_.num_blocks; }
  int64_t block_size() const { return layout_.block_size; }
  /// Tokens the whole cache can hold.
  int64_t capacity_tokens() const { return layout_.num_blocks * layout_.block_size; }
  uint64_t bytes() const { return bytes_; }

 private:
  KvCacheLayout layout_;
  std::vector<Tensor> layers_;
  uint64_t bytes_ = 0;
};

}  // namespace photon
