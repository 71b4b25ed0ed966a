#include "models/compressed_tensors.hpp"

#include <regex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace photon {
namespace {

using nlohmann::json;

Status refuse(std::string_view source, const std::string& what) {
  return Status(StatusCode::kUnsupported, fmt::format("{}: quantization_config: {}", source, what));
}

bool matches(const std::string& pattern, std::string_view module) {
  if (pattern == "Linear") return true;  // every projection PhotonInfer loads is a Linear
  if (pattern.starts_with("re:")) {
    try {
      return std::regex_search(std::string(module), std::regex(pattern.substr(3)),
                               std::regex_constants::match_continuous);
    } catch (const std::regex_error&) {
      return false;  // checked when the config was read
    }
  }
  return pattern == module;
}

Result<std::vector<std::string>> string_list(const json& o, const char* key, std::string_view source) {
  std::vector<std::string> out;
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return out;
  if (!it->is_array()) return refuse(source, fmt::format("'{}' must be a list of strings", key));
  for (const json& v : *it) {
    if (!v.is_string()) return refuse(source, fmt::format("'{}' must be a list of strings", key));
    std::string s = v.get<std::string>();
    if (s.starts_with("re:") && s.size() > 512) {
      return refuse(source,
                    fmt::format("'{}' holds a regular expression of {} characters; at most 512", key, s.size()));
    }
    if (s.starts_with("re:")) {
      try {
        (void)std::regex(s.substr(3));
      } catch (const std::regex_error&) {
        return refuse(source, fmt::format("'{}' holds a regular expression that does not parse: '{}'", key, s));
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

// Typed fields that never throw: `fallback` when the key is absent or null, an error naming the field when it holds
// another type.
Result<std::string> string_field(const json& o, const char* key, const std::string& where, std::string fallback,
                                 std::string_view source) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_string()) return refuse(source, fmt::format("{}{} must be a string", where, key));
  return it->get<std::string>();
}

Result<int64_t> int_field(const json& o, const char* key, const std::string& where, int64_t fallback,
                          std::string_view source) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return refuse(source, fmt::format("{}{} must be an integer", where, key));
  return it->get<int64_t>();
}

Result<bool> bool_field(const json& o, const char* key, const std::string& where, bool fallback,
                        std::string_view source) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return refuse(source, fmt::format("{}{} must be true or false", where, key));
  return it->get<bool>();
}

Result<Int8Storage> storage_of(const std::string& format, std::string_view source) {
  if (format == "int-quantized") return Int8Storage::kInt8;
  if (format == "pack-quantized") return Int8Storage::kPacked;
  return refuse(source, fmt::format("format '{}' is not supported; PhotonInfer loads int-quantized and "
                                    "pack-quantized int8 weights",
                                    format));
}

}  // namespace

std::optional<Int8Scheme> CheckpointQuantization::scheme_for(std::string_view module) const {
  for (const std::string& pattern : ignore) {
    if (matches(pattern, module)) return std::nullopt;
  }
  for (const Group& g : groups) {
    for (const std::string& pattern : g.targets) {
      if (matches(pattern, module)) return g.scheme;
    }
  }
  return std::nullopt;
}

Result<CheckpointQuantization> parse_quantization_config(const json& config, std::string_view source) {
  CheckpointQuantization q;
  const auto qc_it = config.find("quantization_config");
  if (qc_it == config.end() || qc_it->is_null()) return q;
  const json& qc = *qc_it;
  if (!qc.is_object()) return refuse(source, "must be an object");
  PHOTON_ASSIGN_OR_RETURN(const std::string method, string_field(qc, "quant_method", "", "", source));
  if (method != "compressed-tensors") {
    return refuse(source, fmt::format("quant_method '{}' is not supported; PhotonInfer loads compressed-tensors "
                                      "int8 checkpoints (photon quantize writes them), or quantizes a float "
                                      "checkpoint at load with --quantization int8",
                                      method));
  }
  PHOTON_ASSIGN_OR_RETURN(const std::string status, string_field(qc, "quantization_status", "", "compressed", source));
  if (status != "compressed") {
    return refuse(source, fmt::format("quantization_status '{}': the weights are not stored compressed", status));
  }
  if (const auto kv = qc.find("kv_cache_scheme"); kv != qc.end() && !kv->is_null()) {
    return refuse(source, "kv_cache_scheme (a quantized KV cache) is not supported");
  }
  PHOTON_ASSIGN_OR_RETURN(const std::string top_format, string_field(qc, "format", "", "int-quantized", source));
  PHOTON_ASSIGN_OR_RETURN(q.ignore, string_list(qc, "ignore", source));
  const auto groups = qc.find("config_groups");
  if (groups == qc.end() || !groups->is_object() || groups->empty()) {
    return refuse(source, "config_groups (an object of schemes) is missing or empty");
  }
  for (const auto& [name, g] : groups->items()) {
    const std::string where = "config_groups." + name;
    if (!g.is_object()) return refuse(source, where + " must be an object");
    CheckpointQuantization::Group group;
    PHOTON_ASSIGN_OR_RETURN(group.targets, string_list(g, "targets", source));
    if (group.targets.empty()) return refuse(source, where + ".targets is empty");
    const auto w_it = g.find("weights");
    if (w_it == g.end() || !w_it->is_object()) {
      return refuse(source, where + ".weights is missing (only weight quantization is served)");
    }
    const json& w = *w_it;
    const std::string wf = where + ".weights.";
    PHOTON_ASSIGN_OR_RETURN(const int64_t bits, int_field(w, "num_bits", wf, 0, source));
    if (bits != 8) {
      return refuse(source,
                    fmt::format("{}num_bits is {}; PhotonInfer serves 8-bit weights (no int4 packs)", wf, bits));
    }
    PHOTON_ASSIGN_OR_RETURN(const std::string type, string_field(w, "type", wf, "int", source));
    if (type != "int") return refuse(source, fmt::format("{}type '{}' is not supported (int only)", wf, type));
    PHOTON_ASSIGN_OR_RETURN(const bool symmetric, bool_field(w, "symmetric", wf, true, source));
    if (!symmetric) return refuse(source, where + ".weights is asymmetric (zero points); only symmetric is supported");
    PHOTON_ASSIGN_OR_RETURN(const bool dynamic, bool_field(w, "dynamic", wf, false, source));
    if (dynamic) return refuse(source, where + ".weights.dynamic: weights must be quantized ahead of time");
    if (const auto order = w.find("actorder"); order != w.end() && !order->is_null() && *order != false) {
      return refuse(source, where + ".weights.actorder (activation reordering) is not supported");
    }
    PHOTON_ASSIGN_OR_RETURN(const std::string strategy, string_field(w, "strategy", wf, "", source));
    if (strategy == "group") {
      PHOTON_ASSIGN_OR_RETURN(const int64_t gs, int_field(w, "group_size", wf, 0, source));
      if (gs <= 0 || gs % 16 != 0 || gs > (int64_t{1} << 30)) {
        return refuse(source, fmt::format("{}group_size must be a positive multiple of 16, not {}", wf, gs));
      }
      group.scheme.group_size = gs;
    } else if (strategy != "channel") {
      return refuse(source, fmt::format("{}strategy '{}' is not supported (channel or group)", wf, strategy));
    }
    if (const auto out = g.find("output_activations"); out != g.end() && !out->is_null()) {
      return refuse(source, where + ".output_activations is not supported");
    }
    if (const auto in = g.find("input_activations"); in != g.end() && !in->is_null()) {
      bool dynamic_activations = false;
      if (in->is_object()) {
        PHOTON_ASSIGN_OR_RETURN(dynamic_activations,
                                bool_field(*in, "dynamic", where + ".input_activations.", false, source));
      }
      if (!dynamic_activations) {
        return refuse(source, where +
                                  ".input_activations has static scales, which are not supported (dynamic "
                                  "per-token activation quantization is served as W8A16)");
      }
      q.activations_dropped = true;
    }
    PHOTON_ASSIGN_OR_RETURN(const std::string format, string_field(g, "format", where + ".", top_format, source));
    PHOTON_ASSIGN_OR_RETURN(group.scheme.storage, storage_of(format, source));
    q.groups.push_back(std::move(group));
  }
  return q;
}

}  // namespace photon
