// The decoder's weights on the backend's device: from a safetensors checkpoint (memory-mapped; zero-copy on the
// CPU) or generated from a seed (dummy weights, for benchmarks and tests without a download).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/backend.hpp"
#include "core/safetensors.hpp"
#include "models/model_config.hpp"
#include "models/tensor_parallel.hpp"

namespace photon {

/// One layer. The q, k and v projections are stored as one matrix, and gate and up as another, so that each is one
/// matmul (one pass over the activations, one kernel); checkpoints keep them apart and loading lays them together.
struct LayerWeights {
  Tensor input_norm;    ///< f32 [hidden]
  Weight qkv_proj;      ///< [(heads + 2 * kv_heads) * head_dim, hidden]: q_proj's rows, then k_proj's, then v_proj's
  Weight o_proj;        ///< [hidden, heads * head_dim]
  Tensor q_norm;        ///< f32 [head_dim] (Qwen3 only; empty otherwise)
  Tensor k_norm;        ///< f32 [head_dim] (Qwen3 only; empty otherwise)
  Tensor post_norm;     ///< f32 [hidden]
  Weight gate_up_proj;  ///< [2 * intermediate, hidden]: gate_proj's rows, then up_proj's
  Weight down_proj;     ///< [hidden, intermediate]
};

struct ModelWeights {
  Weight embed;       ///< [vocab, hidden]; int8 only as the quantized LM head it is tied to
  Tensor final_norm;  ///< f32 [hidden]
  Weight lm_head;     ///< [vocab, hidden]; the same weight as embed when tied
  std::vector<LayerWeights> layers;
  uint64_t bytes = 0;  ///< bytes of weights resident on the device (tied embedding counted once)
};

/// Called as loading proceeds: bytes done so far out of the total. May be empty.
using LoadProgress = std::function<void(uint64_t done, uint64_t total)>;

/// Loads and validates every tensor the config needs (names, shapes, dtypes); errors name the tensor and file.
/// Only `shard`'s slice of each tensor reaches the device (tensor parallelism; the default shard is the whole).
Result<ModelWeights> load_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint, Backend& backend,
                                  const TensorParallelShard& shard = {}, const LoadProgress& progress = {});

/// Deterministic random weights in `dtype` from `seed`, scaled so that activations keep unit size through the
/// layers and the logits are spread (standard deviation about 3), not flat.
/// A shard's slice holds exactly the values of the unsharded tensors, so every tensor-parallel size computes the
/// same model.
Result<ModelWeights> make_dummy_weights(const ModelConfig& config, Backend& backend, uint64_t seed, DType dtype,
                                        const TensorParallelShard& shard = {}, const LoadProgress& progress = {});

}  // namespace photon
