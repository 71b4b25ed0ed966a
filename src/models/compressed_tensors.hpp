// The quantization_config of a compressed-tensors checkpoint (the layout llm-compressor writes and transformers and
// vLLM load): which modules hold int8 weights, and how. PhotonInfer serves symmetric 8-bit integer weights, one
// scale per output channel or per group of input features, stored as int8 (`int-quantized`) or packed four to an
// int32 (`pack-quantized`); activations stay bf16 (a W8A8 checkpoint with dynamic activation scales is served as
// W8A16). Everything else is refused when the config is read, with an error that names the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <photon/status.hpp>

namespace photon {

enum class Int8Storage : uint8_t {
  kInt8,    ///< "int-quantized": `weight` is int8 [N, K]
  kPacked,  ///< "pack-quantized": `weight_packed` is int32 [N, ceil(K / 4)], value + 128 per byte, low byte first
};

/// How one module's weight is stored.
struct Int8Scheme {
  Int8Storage storage = Int8Storage::kInt8;
  int64_t group_size = 0;  ///< input features per scale; 0: one scale per output channel (`weight_scale` [N, 1])
};

struct CheckpointQuantization {
  struct Group {
    std::vector<std::string> targets;  ///< "Linear", a module name, or "re:REGEX" (matched from the start)
    Int8Scheme scheme;
  };
  std::vector<Group> groups;         ///< empty: the checkpoint is not quantized
  std::vector<std::string> ignore;   ///< modules left in floats, same syntax as targets
  bool activations_dropped = false;  ///< a W8A8 scheme's dynamic activation quantization is not applied

  bool quantized() const { return !groups.empty(); }
  /// The scheme of a linear module (e.g. "model.layers.0.self_attn.q_proj"), or nullopt when it keeps floats.
  std::optional<Int8Scheme> scheme_for(std::string_view module) const;
};

/// Reads config.json's "quantization_config" object. `source` names the file in errors.
Result<CheckpointQuantization> parse_quantization_config(const nlohmann::json& config, std::string_view source);

}  // namespace photon
