// libFuzzer target: config.json (its quantization_config included) and generation_config.json parsing on arbitrary
// text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "models/model_config.hpp"
#include "models/rope_frequencies.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = photon::parse_model_config(text, "fuzz/config.json");
  if (config.is_ok()) {
    (void)photon::apply_generation_config(text, *config, "fuzz/generation_config.json");
    (void)photon::rope_inv_freq(config->rope, config->head_dim);
    (void)config->num_parameters();
    // A quantization_config's targets and ignore patterns, matched against the modules the loader asks about.
    for (const char* module : {"model.layers.0.self_attn.q_proj", "model.layers.31.mlp.down_proj", "lm_head"}) {
      (void)config->quantization.scheme_for(module);
    }
  }
  return 0;
}
