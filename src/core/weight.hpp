// Weight: a matmul's weight matrix [out_features, in_features], either plain floats or group-wise int8.
//
// Quantized weights are symmetric int8 with one f32 scale per group of `group_size` consecutive input features of a
// row (the last group of a row may be shorter when group_size does not divide in_features): the weight at (n, k) is
// values[n, k] * scales[n, k / group_size]. This is the layout of compressed-tensors' "group" strategy; its
// "channel" strategy is the case group_size == in_features.
#pragma once

#include <cstdint>
#include <utility>

#include "core/tensor.hpp"

namespace photon {

struct Weight {
  Tensor values;           ///< [N, K]: f32, f16 or bf16, or i8 when quantized
  Tensor scales;           ///< f32 [N, ceil(K / group_size)] when quantized; undefined otherwise
  int64_t group_size = 0;  ///< input features per scale when quantized; 0 otherwise

  Weight() = default;
  /// A plain float weight (implicit, so a float Tensor is usable wherever a Weight is expected).
  Weight(Tensor t) : values(std::move(t)) {}  // NOLINT(google-explicit-constructor)

  bool defined() const { return values.defined(); }
  bool quantized() const { return scales.defined(); }
  int64_t rows() const { return values.size(0); }
  int64_t cols() const { return values.size(1); }
  int64_t num_groups() const { return quantized() ? scales.size(1) : 0; }
  /// Bytes resident: values and scales.
  size_t nbytes() const { return values.nbytes() + (quantized() ? scales.nbytes() : 0); }
};

}  // namespace photon
