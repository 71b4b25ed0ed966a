// RoPE inverse frequencies per head-dimension pair, with the checkpoint's scaling applied (default, linear, llama3).
#pragma once

#include <vector>

#include "models/model_config.hpp"

namespace photon {

/// head_dim / 2 inverse frequencies, computed as transformers does (float32 throughout, llama3 smoothing included).
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim);

}  // namespace photon
