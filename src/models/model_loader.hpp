// Resolves a --model argument (a checkpoint folder, or dummy:NAME) into a config and weights on a backend.
#pragma once

#include <string>

#include "models/model_config.hpp"
#include "models/quantization.hpp"
#include "models/weights.hpp"

namespace photon {

enum class LoadFormat : uint8_t {
  kAuto,         ///< safetensors for folders, dummy weights for dummy:NAME
  kSafetensors,  ///< model.safetensors or sharded model-*.safetensors with an index
  kDummy,        ///< random weights from the seed; the folder needs only config.json
};

/// "auto", "safetensors" or "dummy"; nullopt when unknown.
std::optional<LoadFormat> parse_load_format(std::string_view name);

struct ModelSource {
  std::string model;  ///< checkpoint folder, or "dummy:NAME"
  LoadFormat format = LoadFormat::kAuto;
  uint64_t seed = 0;                  ///< dummy weights' seed
  DType dummy_dtype = DType::kBF16;   ///< dummy weights' dtype
  QuantizationConfig quantization{};  ///< applied on the device once the weights are there
};

struct LoadedModel {
  ModelConfig config;
  ModelWeights weights;
};

/// Reads the config and loads (or generates) the weights onto `backend`.
Result<LoadedModel> load_model(const ModelSource& source, Backend& backend, const LoadProgress& progress = {});

/// Loads (or generates) one tensor-parallel shard's weights of the model whose config load_config() returned, and
/// quantizes them as source.quantization asks.
Result<ModelWeights> load_model_weights(const ModelSource& source, const ModelConfig& config, Backend& backend,
                                        const TensorParallelShard& shard, const LoadProgress& progress = {});

/// Reads just the config (for planning memory before weights are loaded).
Result<ModelConfig> load_config(const ModelSource& source);

}  // namespace photon
