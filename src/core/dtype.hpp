// Element types of tensors, and scalar conversions between the 16-bit float formats and float.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace photon {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kI8,  ///< int8 values; quantized weights carry their scales in a separate f32/bf16 tensor (group-wise)
  kI32,
  kI64,
  kFP8E4M3,  ///< reserved: recognised in files, not computed on yet
};

/// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kI8:
    case DType::kFP8E4M3:
      return 1;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
  }
  return 0;
}

/// Lower-case name: "f32", "f16", "bf16", "i8", "i32", "i64", "fp8_e4m3".
std::string_view dtype_name(DType t);
/// Parses our names and the common aliases ("float32", "bfloat16", "half", ...).
std::optional<DType> parse_dtype(std::string_view name);
/// Parses a safetensors dtype string ("F32", "F16", "BF16", "I8", "I32", "I64", "F8_E4M3").
std::optional<DType> dtype_from_safetensors(std::string_view name);
/// The safetensors dtype string of `t` (the inverse of dtype_from_safetensors).
std::string_view dtype_safetensors_name(DType t);

constexpr bool is_float_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// bf16 is the upper half of an IEEE float: widening is exact.
inline float bf16_to_f32(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t v);
uint16_t f32_to_f16(float f);

}  // namespace photon
