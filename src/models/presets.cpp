#include "models/presets.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace photon {
namespace {

using nlohmann::json;

json llama3(int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim, bool tied,
            double rope_factor) {
  return json{
      {"architectures", {"LlamaForCausalLM"}},
      {"vocab_size", 128256},
      {"hidden_size", hidden},
      {"intermediate_size", inter},
      {"num_hidden_layers", layers},
      {"num_attention_heads", heads},
      {"num_key_value_heads", kv_heads},
      {"head_dim", head_dim},
      {"hidden_act", "silu"},
      {"max_position_embeddings", 131072},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 500000.0},
      {"rope_scaling",
       {{"rope_type", "llama3"},
        {"factor", rope_factor},
        {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 8192}}},
      {"tie_word_embeddings", tied},
      {"torch_dtype", "bfloat16"},
      {"bos_token_id", 128000},
      {"eos_token_id", {128001, 128008, 128009}},
  };
}

json qwen3(int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim,
           bool tied) {
  return json{
      {"architectures", {"Qwen3ForCausalLM"}},
      {"vocab_size", 151936},
      {"hidden_size", hidden},
      {"intermediate_size", inter},
      {"num_hidden_layers", layers},
      {"num_attention_heads", heads},
      {"num_key_value_heads", kv_heads},
      {"head_dim", head_dim},
      {"hidden_act", "silu"},
      {"max_position_embeddings", 40960},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 1000000.0},
      {"rope_scaling", nullptr},
      {"attention_bias", false},
      {"tie_word_embeddings", tied},
      {"torch_dtype", "bfloat16"},
      {"bos_token_id", 151643},
      {"eos_token_id", {151645, 151643}},
  };
}

struct Preset {
  const char* name;
  json (*make)();
};

const Preset kPresets[] = {
    {"llama-3.2-1b", [] { return llama3(2048, 8192, 16, 32, 8, 64, true, 32.0); }},
    {"llama-3.2-3b", [] { return llama3(3072, 8192, 28, 24, 8, 128, true, 32.0); }},
    {"llama-3.1-8b", [] { return llama3(4096, 14336, 32, 32, 8, 128, false, 8.0); }},
    {"llama-3.1-70b", [] { return llama3(8192, 28672, 80, 64, 8, 128, false, 8.0); }},
    {"qwen3-0.6b", [] { return qwen3(1024, 3072, 28, 16, 8, 128, true); }},
    {"qwen3-1.7b", [] { return qwen3(2048, 6144, 28, 16, 8, 128, true); }},
    {"qwen3-8b", [] { return qwen3(4096, 12288, 36, 32, 8, 128, false); }},
    {"qwen3-32b", [] { return qwen3(5120, 25600, 64, 64, 8, 128, false); }},
    // Fast test shapes: two layers over the real vocabularies.
    {"tiny-llama3", [] { return llama3(64, 128, 2, 4, 2, 16, true, 32.0); }},
    {"tiny-qwen3", [] { return qwen3(64, 128, 2, 4, 2, 32, true); }},
};

}  // namespace

std::vector<std::string> dummy_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

Result<json> dummy_preset_config_json(std::string_view name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return p.make();
  }
  return Status(StatusCode::kNotFound, fmt::format("unknown dummy model '{}'; choose one of: {}", name,
                                                   fmt::join(dummy_preset_names(), ", ")));
}

Result<ModelConfig> dummy_preset_config(std::string_view name) {
  PHOTON_ASSIGN_OR_RETURN(json j, dummy_preset_config_json(name));
  return parse_model_config_json(j, fmt::format("dummy:{}", name));
}

}  // namespace photon
