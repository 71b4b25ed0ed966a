// libFuzzer target: config.json and generation_config.json parsing on arbitrary text.
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
  }
  return 0;
}
