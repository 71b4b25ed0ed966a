#include "models/model_config.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.hpp"

namespace photon {
namespace {

using nlohmann::json;

Status config_error(std::string_view source, std::string message) {
  return Status(StatusCode::kFormatError, fmt::format("{}: {}", source, message));
}

// Reads an integer field; `fallback` is used when absent (nullopt means required).
Result<int64_t> get_int(const json& o, const char* key, std::string_view source,
                        std::optional<int64_t> fallback = std::nullopt) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) {
    if (fallback) return *fallback;
    return config_error(source, fmt::format("required field '{}' is missing", key));
  }
  if (!it->is_number_integer()) return config_error(source, fmt::format("field '{}' must be an integer", key));
  return it->get<int64_t>();
}

Result<double> get_number(const json& o, const char* key, std::string_view source,
                          std::optional<double> fallback = std::nullopt) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) {
    if (fallback) return *fallback;
    return config_error(source, fmt::format("required field '{}' is missing", key));
  }
  if (!it->is_number()) return config_error(source, fmt::format("field '{}' must be a number", key));
  return it->get<double>();
}

Result<bool> get_bool(const json& o, const char* key, std::string_view source, bool fallback) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return config_error(source, fmt::format("field '{}' must be true or false", key));
  return it->get<bool>();
}

// An id field that may be an integer or a list of integers.
Status add_ids(const json& o, const char* key, std::string_view source, std::vector<int32_t>& ids) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return Status::ok();
  auto add = [&](const json& v) -> Status {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      return config_error(source, fmt::format("field '{}' must hold non-negative token ids", key));
    }
    const auto id = static_cast<int32_t>(v.get<int64_t>());
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    return Status::ok();
  };
  if (it->is_array()) {
    for (const auto& v : *it) PHOTON_RETURN_IF_ERROR(add(v));
    return Status::ok();
  }
  return add(*it);
}

Status parse_rope(const json& root, std::string_view source, RopeConfig& rope) {
  // transformers 5.x: everything under rope_parameters; 4.x: rope_theta plus an optional rope_scaling object.
  const json* params = nullptr;
  const auto rp = root.find("rope_parameters");
  if (rp != root.end() && !rp->is_null()) {
    if (!rp->is_object()) return config_error(source, "field 'rope_parameters' must be an object");
    params = &*rp;
  } else {
    const auto rs = root.find("rope_scaling");
    if (rs != root.end() && !rs->is_null()) {
      if (!rs->is_object()) return config_error(source, "field 'rope_scaling' must be an object or null");
      params = &*rs;
    }
  }
  PHOTON_ASSIGN_OR_RETURN(rope.theta, get_number(root, "rope_theta", source, 10000.0));
  if (params != nullptr && params->contains("rope_theta")) {
    PHOTON_ASSIGN_OR_RETURN(rope.theta, get_number(*params, "rope_theta", source));
  }
  if (rope.theta <= 0) return config_error(source, "rope_theta must be positive");
  if (params == nullptr) return Status::ok();

  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    const auto t = params->find(key);
    if (t != params->end() && t->is_string()) {
      type = t->get<std::string>();
      break;
    }
  }
  if (type == "default") {
    rope.type = RopeType::kDefault;
    return Status::ok();
  }
  if (type == "linear") {
    rope.type = RopeType::kLinear;
    PHOTON_ASSIGN_OR_RETURN(rope.factor, get_number(*params, "factor", source));
    return Status::ok();
  }
  if (type == "llama3") {
    rope.type = RopeType::kLlama3;
    PHOTON_ASSIGN_OR_RETURN(rope.factor, get_number(*params, "factor", source));
    PHOTON_ASSIGN_OR_RETURN(rope.low_freq_factor, get_number(*params, "low_freq_factor", source));
    PHOTON_ASSIGN_OR_RETURN(rope.high_freq_factor, get_number(*params, "high_freq_factor", source));
    PHOTON_ASSIGN_OR_RETURN(rope.original_max_position_embeddings,
                            get_int(*params, "original_max_position_embeddings", source));
    if (rope.factor <= 0 || rope.low_freq_factor <= 0 || rope.high_freq_factor <= rope.low_freq_factor ||
        rope.original_max_position_embeddings <= 0) {
      return config_error(source,
                          "llama3 RoPE scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                          "original_max_position_embeddings > 0");
    }
    return Status::ok();
  }
  return Status(StatusCode::kUnsupported,
                fmt::format("{}: RoPE type '{}' is not supported (supported: default, linear, llama3)", source, type));
}

}  // namespace

int64_t ModelConfig::num_parameters() const {
  const int64_t attn = hidden_size * (q_size() + 2 * kv_size()) + q_size() * hidden_size;
  const int64_t mlp = 3 * hidden_size * intermediate_size;
  const int64_t norms = 2 * hidden_size + (has_qk_norm() ? 2 * head_dim : 0);
  const int64_t embed = vocab_size * hidden_size * (tie_word_embeddings ? 1 : 2);
  return num_layers * (attn + mlp + norms) + embed + hidden_size;
}

Result<ModelConfig> parse_model_config(std::string_view text, std::string_view source) {
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return config_error(source, "not well-formed JSON");
  return parse_model_config_json(root, source);
}

Result<ModelConfig> parse_model_config_json(const json& root, std::string_view source) {
  if (!root.is_object()) return config_error(source, "the top level must be a JSON object");
  ModelConfig c;
  const auto arch = root.find("architectures");
  if (arch == root.end() || !arch->is_array() || arch->empty() || !(*arch)[0].is_string()) {
    return config_error(source, "required field 'architectures' (a list such as [\"LlamaForCausalLM\"]) is missing");
  }
  c.architecture_name = (*arch)[0].get<std::string>();
  if (c.architecture_name == "LlamaForCausalLM") {
    c.architecture = Architecture::kLlama;
  } else if (c.architecture_name == "Qwen3ForCausalLM") {
    c.architecture = Architecture::kQwen3;
  } else {
    return Status(StatusCode::kUnsupported,
                  fmt::format("{}: architecture '{}' is not supported (supported: LlamaForCausalLM, "
                              "Qwen3ForCausalLM)",
                              source, c.architecture_name));
  }
  PHOTON_ASSIGN_OR_RETURN(c.vocab_size, get_int(root, "vocab_size", source));
  PHOTON_ASSIGN_OR_RETURN(c.hidden_size, get_int(root, "hidden_size", source));
  PHOTON_ASSIGN_OR_RETURN(c.intermediate_size, get_int(root, "intermediate_size", source));
  PHOTON_ASSIGN_OR_RETURN(c.num_layers, get_int(root, "num_hidden_layers", source));
  PHOTON_ASSIGN_OR_RETURN(c.num_heads, get_int(root, "num_attention_heads", source));
  PHOTON_ASSIGN_OR_RETURN(c.num_kv_heads, get_int(root, "num_key_value_heads", source, c.num_heads));
  for (auto [name, v] : {std::pair{"vocab_size", c.vocab_size},
                         {"hidden_size", c.hidden_size},
                         {"intermediate_size", c.intermediate_size},
                         {"num_hidden_layers", c.num_layers},
                         {"num_attention_heads", c.num_heads},
                         {"num_key_value_heads", c.num_kv_heads}}) {
    if (v <= 0 || v > (int64_t{1} << 31)) {
      return config_error(source, fmt::format("field '{}' must be a positive integer, not {}", name, v));
    }
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return config_error(source, fmt::format("num_attention_heads ({}) must be a multiple of num_key_value_heads ({})",
                                            c.num_heads, c.num_kv_heads));
  }
  if (root.contains("head_dim") && !root["head_dim"].is_null()) {
    PHOTON_ASSIGN_OR_RETURN(c.head_dim, get_int(root, "head_dim", source));
  } else if (c.hidden_size % c.num_heads == 0) {
    c.head_dim = c.hidden_size / c.num_heads;
  } else {
    return config_error(source,
                        "required field 'head_dim' is missing (hidden_size is not a multiple of "
                        "num_attention_heads)");
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || c.head_dim > 512) {
    return config_error(source,
                        fmt::format("field 'head_dim' must be an even number from 2 to 512, not {}", c.head_dim));
  }
  PHOTON_ASSIGN_OR_RETURN(c.rms_norm_eps, get_number(root, "rms_norm_eps", source, 1e-6));
  PHOTON_ASSIGN_OR_RETURN(c.max_position_embeddings, get_int(root, "max_position_embeddings", source, 4096));
  PHOTON_ASSIGN_OR_RETURN(c.tie_word_embeddings, get_bool(root, "tie_word_embeddings", source, false));
  PHOTON_RETURN_IF_ERROR(parse_rope(root, source, c.rope));

  const auto act = root.find("hidden_act");
  if (act != root.end() && !(act->is_string() && act->get<std::string>() == "silu")) {
    return Status(StatusCode::kUnsupported, fmt::format("{}: hidden_act must be \"silu\"", source));
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    PHOTON_ASSIGN_OR_RETURN(bool bias, get_bool(root, key, source, false));
    if (bias) {
      return Status(StatusCode::kUnsupported,
                    fmt::format("{}: '{}': true is not supported (no bias terms)", source, key));
    }
  }
  for (const char* key : {"torch_dtype", "dtype"}) {
    const auto d = root.find(key);
    if (d != root.end() && d->is_string()) c.torch_dtype = d->get<std::string>();
  }
  const auto bos = root.find("bos_token_id");
  if (bos != root.end() && bos->is_number_integer()) c.bos_token_id = static_cast<int32_t>(bos->get<int64_t>());
  PHOTON_RETURN_IF_ERROR(add_ids(root, "eos_token_id", source, c.eos_token_ids));
  PHOTON_ASSIGN_OR_RETURN(c.quantization, parse_quantization_config(root, source));
  return c;
}

Status apply_generation_config(std::string_view text, ModelConfig& c, std::string_view source) {
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return config_error(source, "not a well-formed JSON object");
  PHOTON_RETURN_IF_ERROR(add_ids(root, "eos_token_id", source, c.eos_token_ids));
  const auto bos = root.find("bos_token_id");
  if (bos != root.end() && bos->is_number_integer()) c.bos_token_id = static_cast<int32_t>(bos->get<int64_t>());
  GenerationDefaults& g = c.generation;
  PHOTON_ASSIGN_OR_RETURN(g.do_sample, get_bool(root, "do_sample", source, false));
  PHOTON_ASSIGN_OR_RETURN(double t, get_number(root, "temperature", source, 1.0));
  PHOTON_ASSIGN_OR_RETURN(double p, get_number(root, "top_p", source, 1.0));
  PHOTON_ASSIGN_OR_RETURN(int64_t k, get_int(root, "top_k", source, 0));
  PHOTON_ASSIGN_OR_RETURN(double rp, get_number(root, "repetition_penalty", source, 1.0));
  g.temperature = static_cast<float>(t);
  g.top_p = static_cast<float>(p);
  g.top_k = static_cast<int>(k);
  g.repetition_penalty = static_cast<float>(rp);
  return Status::ok();
}

Result<ModelConfig> load_model_config(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(dir) / "config.json").string();
  auto text = read_text_file(config_path);
  if (!text) {
    return Status(StatusCode::kNotFound, fmt::format("'{}' not found; --model must name a folder holding a Hugging "
                                                     "Face config.json, or a dummy:NAME preset",
                                                     config_path));
  }
  PHOTON_ASSIGN_OR_RETURN(ModelConfig c, parse_model_config(*text, config_path));
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  std::error_code ec;
  if (fs::exists(gen_path, ec)) {
    PHOTON_ASSIGN_OR_RETURN(std::string gen, read_text_file(gen_path));
    PHOTON_RETURN_IF_ERROR(apply_generation_config(gen, c, gen_path));
  }
  return c;
}

}  // namespace photon
