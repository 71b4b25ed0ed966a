// ModelConfig: what the decoder needs to know about a checkpoint, read from Hugging Face config.json and
// generation_config.json. Both spellings of RoPE settings are accepted: transformers 4.x (`rope_theta`,
// `rope_scaling`) and 5.x (`rope_parameters`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <photon/status.hpp>

#include "models/compressed_tensors.hpp"

namespace photon {

enum class Architecture : uint8_t {
  kLlama,  ///< LlamaForCausalLM (Llama 3.x)
  kQwen3,  ///< Qwen3ForCausalLM: per-head RMSNorm on q and k before RoPE
};

enum class RopeType : uint8_t {
  kDefault,  ///< theta^(-2i/d)
  kLinear,   ///< default frequencies divided by `factor`
  kLlama3,   ///< Llama 3.1's wavelength-dependent scaling
};

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

/// Sampling defaults a checkpoint's generation_config.json suggests.
struct GenerationDefaults {
  bool do_sample = false;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;  ///< 0: disabled
  float repetition_penalty = 1.0f;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  ///< as written in config.json, e.g. "LlamaForCausalLM"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  RopeConfig rope;
  std::string torch_dtype = "bfloat16";  ///< the checkpoint's declared weight dtype
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  ///< union of config.json and generation_config.json
  GenerationDefaults generation;
  CheckpointQuantization quantization;  ///< int8 weights of a compressed-tensors checkpoint (none by default)

  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
  bool has_qk_norm() const { return architecture == Architecture::kQwen3; }
  /// Number of weight parameters (embedding counted once when tied).
  int64_t num_parameters() const;
};

/// Parses the text of config.json. `source` names the file in error messages.
Result<ModelConfig> parse_model_config(std::string_view json_text, std::string_view source = "config.json");
/// Same, from a parsed JSON object.
Result<ModelConfig> parse_model_config_json(const nlohmann::json& root, std::string_view source);
/// Merges generation_config.json (EOS ids, sampling defaults) into `config`.
Status apply_generation_config(std::string_view json_text, ModelConfig& config,
                               std::string_view source = "generation_config.json");

/// Reads DIR/config.json and, when present, DIR/generation_config.json.
Result<ModelConfig> load_model_config(const std::string& dir);

}  // namespace photon
