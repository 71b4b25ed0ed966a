// Quantizing a model's weights after they are on the device: group-wise symmetric int8 for the projections of every
// layer (and the LM head when asked); the embedding and the norms stay as they are.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/backend.hpp"
#include "models/weights.hpp"

namespace photon {

struct QuantizationConfig {
  bool int8 = false;         ///< quantize at load (false: keep the checkpoint's weights as they are)
  int64_t group_size = 128;  ///< input features per scale: 32, 64 or 128
  bool lm_head = false;      ///< the LM head too (and the embedding, when the two are one tied matrix)
};

/// "none" or "int8"; nullopt when unknown.
std::optional<bool> parse_quantization(std::string_view name);

/// Quantizes `weights` (this rank's shard) in place on `backend` and updates weights.bytes; each float matrix is
/// freed as soon as its int8 form exists, so loading needs memory for one extra matrix at most. Weights already
/// quantized (an int8 checkpoint) are left as they are. Errors: a group size other than 32, 64 or 128; a shard
/// whose in_features the group size does not divide (groups never straddle ranks); device memory.
Status quantize_weights(ModelWeights& weights, Backend& backend, const QuantizationConfig& config, bool sharded);

}  // namespace photon
