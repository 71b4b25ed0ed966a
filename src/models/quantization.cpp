#include "models/quantization.hpp"

#include <fmt/format.h>

namespace photon {
namespace {

Status quantize_one(Weight& w, const char* name, Backend& backend, const QuantizationConfig& config, bool sharded,
                    uint64_t& bytes) {
  if (w.quantized()) return Status::ok();
  if (sharded && w.cols() % config.group_size != 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("group size {} does not divide this rank's {} in_features of {}; with tensor "
                              "parallelism pick a group size that divides it",
                              config.group_size, w.cols(), name));
  }
  PHOTON_ASSIGN_OR_RETURN(Weight q, backend.quantize_int8(w.values, config.group_size));
  bytes = bytes - w.nbytes() + q.nbytes();
  w = std::move(q);
  return Status::ok();
}

}  // namespace

std::optional<bool> parse_quantization(std::string_view name) {
  if (name == "none" || name.empty()) return false;
  if (name == "int8") return true;
  return std::nullopt;
}

Status quantize_weights(ModelWeights& weights, Backend& backend, const QuantizationConfig& config, bool sharded) {
  if (!config.int8) return Status::ok();
  if (config.group_size != 32 && config.group_size != 64 && config.group_size != 128) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("group size must be 32, 64 or 128, not {}", config.group_size));
  }
  for (LayerWeights& l : weights.layers) {
    PHOTON_RETURN_IF_ERROR(quantize_one(l.qkv_proj, "qkv_proj", backend, config, sharded, weights.bytes));
    PHOTON_RETURN_IF_ERROR(quantize_one(l.o_proj, "o_proj", backend, config, sharded, weights.bytes));
    PHOTON_RETURN_IF_ERROR(quantize_one(l.gate_up_proj, "gate_up_proj", backend, config, sharded, weights.bytes));
    PHOTON_RETURN_IF_ERROR(quantize_one(l.down_proj, "down_proj", backend, config, sharded, weights.bytes));
  }
  if (config.lm_head && !weights.lm_head.quantized()) {
    const bool tied = weights.lm_head.values.raw() == weights.embed.values.raw();
    PHOTON_RETURN_IF_ERROR(quantize_one(weights.lm_head, "lm_head", backend, config, false, weights.bytes));
    if (tied) weights.embed = weights.lm_head;  // one int8 table serves both, as in the checkpoint
  }
  return Status::ok();
}

}  // namespace photon
