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
      return Status(StatusCode::kInvalidArgument, "dummy:NAME models have no checkpoint; drop --load-format "
                                                  "safetensors");
    }
    return dummy_preset_config(std::string_view(source.model).substr(kDummyPrefix.size()));
  }
  return load_model_config(source.model);
}

Result<LoadedModel> load_model(const ModelSource& source, Backend& backend, const LoadProgress& progress) {
  LoadedModel m;
  PHOTON_ASSIGN_OR_RETURN(m.config, load_config(source));
  if (is_preset(source.model) || source.format == LoadFormat::kDummy) {
    PHOTON_ASSIGN_OR_RETURN(m.weights, make_dummy_weights(m.config, backend, source.seed, source.dummy_dtype,
                                                          progress));
    return m;
  }
  PHOTON_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::open(source.model));
  PHOTON_ASSIGN_OR_RETURN(m.weights, load_weights(m.config, ckpt, backend, progress));
  return m;
}

}  // namespace photon
