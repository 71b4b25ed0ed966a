#include "models/tensor_parallel.hpp"

#include <fmt/format.h>

namespace photon {

Status check_tensor_parallel(const ModelConfig& c, int size) {
  if (size < 1) return Status(StatusCode::kInvalidArgument, "tensor_parallel_size must be at least 1");
  if (size == 1) return Status::ok();
  const auto n = static_cast<int64_t>(size);
  if (c.num_heads % n != 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{} attention heads do not split over {} ranks; use a tensor_parallel_size that "
                              "divides {}",
                              c.num_heads, size, c.num_heads));
  }
  if (c.num_kv_heads % n != 0 && n % c.num_kv_heads != 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{} KV heads neither split over {} ranks nor replicate evenly across them; use a "
                              "tensor_parallel_size that divides or is a multiple of {}",
                              c.num_kv_heads, size, c.num_kv_heads));
  }
  if (c.intermediate_size % n != 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the MLP's {} features do not split over {} ranks; use a tensor_parallel_size that "
                              "divides {}",
                              c.intermediate_size, size, c.intermediate_size));
  }
  return Status::ok();
}

TensorParallelShard make_shard(const ModelConfig& c, int rank, int size) {
  TensorParallelShard s;
  s.rank = rank;
  s.size = size;
  const auto r = static_cast<int64_t>(rank);
  const auto n = static_cast<int64_t>(size);
  s.num_heads = c.num_heads / n;
  s.q_head_begin = r * s.num_heads;
  if (c.num_kv_heads >= n) {
    s.num_kv_heads = c.num_kv_heads / n;
    s.kv_head_begin = r * s.num_kv_heads;
  } else {
    // Fewer KV heads than ranks: the rank keeps the KV head of its query heads' group.
    s.num_kv_heads = 1;
    s.kv_head_begin = s.q_head_begin / (c.num_heads / c.num_kv_heads);
  }
  s.intermediate_size = c.intermediate_size / n;
  s.intermediate_begin = r * s.intermediate_size;
  s.vocab_rows = (c.vocab_size + n - 1) / n;
  s.vocab_begin = r * s.vocab_rows;
  return s;
}

ModelConfig shard_config(const ModelConfig& config, const TensorParallelShard& shard) {
  ModelConfig c = config;
  c.num_heads = shard.num_heads;
  c.num_kv_heads = shard.num_kv_heads;
  c.intermediate_size = shard.intermediate_size;
  return c;
}

}  // namespace photon
