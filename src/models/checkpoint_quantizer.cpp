// photon quantize: a float checkpoint to a compressed-tensors int8 one (include/photon/quantize.hpp).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <photon/quantize.hpp>

#include "core/mapped_file.hpp"
#include "core/safetensors.hpp"
#include "core/safetensors_writer.hpp"
#include "cpu/kernels.hpp"
#include "models/model_config.hpp"

namespace photon {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// The quantization_config that describes what quantize_checkpoint writes.
ordered_json quantization_config(int64_t group_size, bool lm_head) {
  ordered_json weights = {{"num_bits", 8},        {"type", "int"},
                          {"symmetric", true},    {"group_size", group_size},
                          {"strategy", "group"},  {"block_structure", nullptr},
                          {"dynamic", false},     {"actorder", nullptr},
                          {"observer", "minmax"}, {"observer_kwargs", ordered_json::object()}};
  ordered_json group = {{"targets", {"Linear"}},
                        {"weights", weights},
                        {"input_activations", nullptr},
                        {"output_activations", nullptr},
                        {"format", "pack-quantized"}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", group}}},
          {"ignore", lm_head ? ordered_json::array() : ordered_json::array({"lm_head"})},
          {"kv_cache_scheme", nullptr},
          {"global_compression_ratio", nullptr}};
}

// Values (q + 128 per byte, little-endian, four to an int32; rows padded with zero bytes) as compressed-tensors'
// pack_to_int32 lays them out for 8 bits.
std::vector<unsigned char> pack(const std::vector<int8_t>& q, int64_t n, int64_t k) {
  const int64_t row_bytes = (k + 3) / 4 * 4;
  std::vector<unsigned char> out(static_cast<size_t>(n * row_bytes), 0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      out[static_cast<size_t>(r * row_bytes + c)] =
          static_cast<unsigned char>(q[static_cast<size_t>(r * k + c)]) ^ 0x80u;
    }
  }
  return out;
}

std::span<const unsigned char> bytes_of(const Tensor& t) {
  return {static_cast<const unsigned char*>(t.raw()), t.nbytes()};
}

}  // namespace

Status quantize_checkpoint(const QuantizeOptions& o) {
  if (o.group_size != 32 && o.group_size != 64 && o.group_size != 128) {
    return Status(StatusCode::kInvalidArgument, fmt::format("group size must be 32, 64 or 128, not {}", o.group_size));
  }
  PHOTON_ASSIGN_OR_RETURN(const ModelConfig config, load_model_config(o.model));
  if (config.quantization.quantized()) {
    return Status(StatusCode::kInvalidArgument, fmt::format("'{}' is already quantized", o.model));
  }
  PHOTON_ASSIGN_OR_RETURN(const std::string config_text, read_text_file((fs::path(o.model) / "config.json").string()));
  ordered_json config_json = ordered_json::parse(config_text, nullptr, false);
  PHOTON_ASSIGN_OR_RETURN(const SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::open(o.model));
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) return Status(StatusCode::kIoError, fmt::format("cannot create '{}': {}", o.out, ec.message()));
  if (fs::equivalent(o.model, o.out, ec)) {
    return Status(StatusCode::kInvalidArgument, "--out must be another folder than --model");
  }

  static const std::regex kProjection(
      R"(model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight)");
  const bool lm_head = o.quantize_lm_head && !config.tie_word_embeddings;
  std::vector<SafetensorsTensor> tensors;
  // The bytes written that are not the checkpoint's own (each inner buffer stays put as the list grows).
  std::vector<std::vector<unsigned char>> owned;
  const std::vector<std::string> names = ckpt.names();
  uint64_t done = 0;
  for (const std::string& name : names) {
    const Tensor t = *ckpt.find(name);
    const SafetensorsEntry& e = *ckpt.entry(name);
    const bool quantize = std::regex_match(name, kProjection) || (lm_head && name == "lm_head.weight");
    if (!quantize) {
      tensors.push_back({name, e.dtype, e.shape, bytes_of(t)});
    } else {
      if (!is_float_dtype(e.dtype) || e.shape.size() != 2) {
        return Status(StatusCode::kFormatError,
                      fmt::format("tensor '{}' is {} with {} dimensions; a projection must be a float matrix", name,
                                  dtype_name(e.dtype), e.shape.size()));
      }
      const int64_t n = e.shape[0], k = e.shape[1], groups = (k + o.group_size - 1) / o.group_size;
      std::vector<int8_t> q(static_cast<size_t>(n * k));
      std::vector<float> scales(static_cast<size_t>(n * groups));
      // Scales are stored in the checkpoint's dtype; each value is rounded against the stored scale.
      const DType scale_dtype = e.dtype;
      cpu::quantize_int8(t.raw(), e.dtype, n, k, o.group_size, q.data(), scales.data(), scale_dtype);
      const std::string module = name.substr(0, name.size() - std::strlen(".weight"));
      owned.push_back(pack(q, n, k));
      tensors.push_back({module + ".weight_packed", DType::kI32, {n, (k + 3) / 4}, owned.back()});
      owned.emplace_back(scales.size() * dtype_size(scale_dtype));
      cpu::from_f32(scales.data(), static_cast<int64_t>(scales.size()), scale_dtype, owned.back().data());
      tensors.push_back({module + ".weight_scale", scale_dtype, {n, groups}, owned.back()});
      const int64_t shape[2] = {n, k};
      owned.emplace_back(sizeof(shape));
      std::memcpy(owned.back().data(), shape, sizeof(shape));
      tensors.push_back({module + ".weight_shape", DType::kI64, {2}, owned.back()});
    }
    if (o.progress) o.progress(++done, names.size());
  }
  PHOTON_RETURN_IF_ERROR(
      write_safetensors((fs::path(o.out) / "model.safetensors").string(), tensors, {{"format", "pt"}}));
  config_json["quantization_config"] = quantization_config(o.group_size, lm_head);
  const fs::path config_path = fs::path(o.out) / "config.json";
  std::ofstream config_out(config_path);
  config_out << config_json.dump(2) << "\n";
  config_out.close();
  if (!config_out) return Status(StatusCode::kIoError, fmt::format("cannot write '{}'", config_path.string()));
  // Everything else a model folder holds (tokenizer, generation config, chat template) comes along.
  for (const auto& entry : fs::directory_iterator(o.model)) {
    const std::string file = entry.path().filename().string();
    if (!entry.is_regular_file() || file == "config.json" || file.ends_with(".safetensors") ||
        file == "model.safetensors.index.json") {
      continue;
    }
    fs::copy_file(entry.path(), fs::path(o.out) / file, fs::copy_options::overwrite_existing, ec);
    if (ec)
      return Status(StatusCode::kIoError, fmt::format("cannot copy '{}': {}", entry.path().string(), ec.message()));
  }
  return Status::ok();
}

}  // namespace photon
