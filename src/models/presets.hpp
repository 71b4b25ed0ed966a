// Built-in model shapes for `--model dummy:NAME`: the exact configurations of real checkpoints, so that dummy
// weights exercise the same shapes, memory and speed as the real thing without a download.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/model_config.hpp"

namespace photon {

/// Names accepted after "dummy:", e.g. "llama-3.2-1b", "qwen3-0.6b", "tiny-llama3".
std::vector<std::string> dummy_preset_names();
/// The config.json of a preset (as the real checkpoint writes it), or an error listing the known names.
Result<nlohmann::json> dummy_preset_config_json(std::string_view name);
/// The parsed config of a preset, EOS ids included.
Result<ModelConfig> dummy_preset_config(std::string_view name);

}  // namespace photon
