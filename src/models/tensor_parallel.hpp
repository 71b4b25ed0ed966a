// Megatron-style tensor parallelism: how one rank's share of the decoder is cut out of the whole model.
//
// Attention heads and the MLP's intermediate features are split evenly over the ranks (column-parallel Q/K/V and
// gate/up projections, row-parallel O and down projections whose partial outputs are summed by an all-reduce).
// KV heads are split like the query heads; when there are fewer KV heads than ranks, each rank keeps the one KV
// head its query heads read (replicated). The vocabulary is split in contiguous ranges of equal length (the last
// padded with zero rows): each rank embeds the ids in its range (an all-reduce fills in the rest) and computes the
// logits of its range (an all-gather assembles them).
#pragma once

#include <cstdint>

#include "models/model_config.hpp"

namespace photon {

/// One rank's slice of the model.
struct TensorParallelShard {
  int rank = 0;  ///< 0 .. size - 1
  int size = 1;  ///< ranks in the group; 1 means no parallelism

  int64_t q_head_begin = 0;        ///< first query head of this rank
  int64_t num_heads = 0;           ///< query heads on this rank
  int64_t kv_head_begin = 0;       ///< first KV head of this rank
  int64_t num_kv_heads = 0;        ///< KV heads on this rank
  int64_t intermediate_begin = 0;  ///< first MLP feature of this rank
  int64_t intermediate_size = 0;   ///< MLP features on this rank
  int64_t vocab_begin = 0;         ///< first token id of this rank's embedding / LM-head rows
  int64_t vocab_rows = 0;          ///< rows of this rank's embedding / LM head (the same on every rank; padded)

  bool is_sharded() const { return size > 1; }
};

/// Checks that `config` can be split over `size` ranks; the error says which dimension does not divide.
Status check_tensor_parallel(const ModelConfig& config, int size);

/// The slice of rank `rank` of `size` (check_tensor_parallel must have passed).
TensorParallelShard make_shard(const ModelConfig& config, int rank, int size);

/// The config one rank runs: heads, KV heads and intermediate size replaced by the rank's share; everything else
/// (hidden size, vocabulary, RoPE, ...) as in `config`.
ModelConfig shard_config(const ModelConfig& config, const TensorParallelShard& shard);

}  // namespace photon
