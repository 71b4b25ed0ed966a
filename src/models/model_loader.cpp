#include "models/model_loader.hpp"

#include "models/presets.hpp"

namespace photon {
namespace {

constexpr std::string_view kDummyPrefix = "dummy:";

bool is_preset(const std::string& model) { return model.starts_with(kDummyPrefix); }

}  // namespace

std::optional<LoadFormat> parse_load_format(std::string_view name) {
  if (name == "auto") return LoadFormat::kAuto;
  if (name == "safetensors") return LoadFormat::kSafetensors;
  if (name == "dummy") return LoadFormat::kDummy;
  return std::nullopt;
}

Result<ModelConfig> load_config(const ModelSource& source) {
  if (is_preset(source.model)) {
    if (source.format == LoadFormat::kSafetensors) {
      return Status(StatusCode::kInvalidArgument,
                    "dummy:NAME models have no checkpoint; drop --load-format "
                    "safetensors");
    }
    return dummy_preset_config(std::string_view(source.model).substr(kDummyPrefix.size()));
  }
  return load_model_config(source.model);
}

Result<ModelWeights> load_model_weights(const ModelSource& source, const ModelConfig& config, Backend& backend,
                                        const TensorParallelShard& shard, const LoadProgress& progress) {
  ModelWeights weights;
  if (is_preset(source.model) || source.format == LoadFormat::kDummy) {
    PHOTON_ASSIGN_OR_RETURN(weights,
                            make_dummy_weights(config, backend, source.seed, source.dummy_dtype, shard, progress));
  } else {
    PHOTON_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::open(source.model));
    PHOTON_ASSIGN_OR_RETURN(weights, load_weights(config, ckpt, backend, shard, progress));
  }
  PHOTON_RETURN_IF_ERROR(quantize_weights(weights, backend, source.quantization, shard.is_sharded()));
  return weights;
}

Result<LoadedModel> load_model(const ModelSource& source, Backend& backend, const LoadProgress& progress) {
  LoadedModel m;
  PHOTON_ASSIGN_OR_RETURN(m.config, load_config(source));
  PHOTON_ASSIGN_OR_RETURN(m.weights, load_model_weights(source, m.config, backend, {}, progress));
  return m;
}

}  // namespace photon
