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
      return refuse(source, fmt::format("'{}' holds a regular expression of {} characters; at most 512", key, s.size()));
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
  const std::string method = qc.value("quant_method", std::string());
  if (method != "compressed-tensors") {
    return refuse(source, fmt::format("quant_method '{}' is not supported; PhotonInfer loads compressed-tensors "
                                      "int8 checkpoints (photon quantize writes them), or quantizes a float "
                                      "checkpoint at load with --quantization int8",
                                      method));
  }
  const std::string status = qc.value("quantization_status", std::string("compressed"));
  if (status != "compressed") {
    return refuse(source, fmt::format("quantization_status '{}': the weights are not stored compressed", status));
  }
  if (qc.contains("kv_cache_scheme") && !qc["kv_cache_scheme"].is_null()) {
    return refuse(source, "kv_cache_scheme (a quantized KV cache) is not supported");
  }
  const std::string top_format = qc.value("format", std::string("int-quantized"));
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
    const json w = g.value("weights", json());
    if (!w.is_object()) return refuse(source, where + ".weights is missing (only weight quantization is served)");
    if (w.value("num_bits", 0) != 8) {
      return refuse(source, fmt::format("{}.weights.num_bits is {}; PhotonInfer serves 8-bit weights (no int4 packs)",
                                        where, w.value("num_bits", json()).dump()));
    }
    if (w.value("type", std::string("int")) != "int") {
      return refuse(source, fmt::format("{}.weights.type '{}' is not supported (int only)", where,
                                        w.value("type", std::string())));
    }
    if (!w.value("symmetric", true))
      return refuse(source, where + ".weights is asymmetric (zero points); only symmetric is supported");
    if (w.value("dynamic", false))
      return refuse(source, where + ".weights.dynamic: weights must be quantized ahead of time");
    if (w.contains("actorder") && !w["actorder"].is_null() && w["actorder"] != false) {
      return refuse(source, where + ".weights.actorder (activation reordering) is not supported");
    }
    const std::string strategy = w.value("strategy", std::string());
    if (strategy == "group") {
      const int64_t gs = w.value("group_size", int64_t{0});
      if (gs <= 0 || gs % 16 != 0) {
        return refuse(source, fmt::format("{}.weights.group_size must be a positive multiple of 16, not {}", where,
                                          w.value("group_size", json()).dump()));
      }
      group.scheme.group_size = gs;
    } else if (strategy != "channel") {
      return refuse(source,
                    fmt::format("{}.weights.strategy '{}' is not supported (channel or group)", where, strategy));
    }
    if (g.contains("output_activations") && !g["output_activations"].is_null()) {
      return refuse(source, where + ".output_activations is not supported");
    }
    if (g.contains("input_activations") && !g["input_activations"].is_null()) {
      const json& a = g["input_activations"];
      if (!a.is_object() || !a.value("dynamic", false)) {
        return refuse(source, where +
                                  ".input_activations has static scales, which are not supported (dynamic "
                                  "per-token activation quantization is served as W8A16)");
      }
      q.activations_dropped = true;
    }
    PHOTON_ASSIGN_OR_RETURN(group.scheme.storage, storage_of(g.value("format", top_format), source));
    q.groups.push_back(std::move(group));
  }
  return q;
}

}  // namespace photon
