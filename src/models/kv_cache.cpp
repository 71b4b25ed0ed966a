#include "models/kv_cache.hpp"

#include <fmt/format.h>

namespace photon {

uint64_t PagedKvCache::bytes_per_block(const ModelConfig& c, int64_t block_size, DType dtype) {
  return static_cast<uint64_t>(c.num_layers) * 2 * static_cast<uint64_t>(c.num_kv_heads * block_size * c.head_dim) *
         dtype_size(dtype);
}

Result<PagedKvCache> PagedKvCache::create(const ModelConfig& c, Backend& backend, int64_t num_blocks,
                                          int64_t block_size, DType dtype) {
  if (num_blocks <= 0 || block_size <= 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the KV cache needs at least one block of at least one token (got {} blocks of {})",
                              num_blocks, block_size));
  }
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("KV cache dtype {} is not supported; use f32 or bf16", dtype_name(dtype)));
  }
  PagedKvCache cache;
  cache.layout_ = {num_blocks, c.num_kv_heads, block_size, c.head_dim};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    auto t = Tensor::empty({num_blocks, 2, c.num_kv_heads, block_size, c.head_dim}, dtype, backend.allocator());
    if (!t) {
      return t.status().with_context(fmt::format("allocating the KV cache ({} blocks of {} tokens, {} bytes)",
                                                 num_blocks, block_size,
                                                 bytes_per_block(c, block_size, dtype) * num_blocks));
    }
    cache.bytes_ += t->nbytes();
    cache.layers_.push_back(std::move(*t));
  }
  return cache;
}

}  // namespace photon
