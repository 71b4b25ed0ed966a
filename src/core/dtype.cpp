#include "core/dtype.hpp"

#include <cmath>

namespace photon {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI8:
      return "i8";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kFP8E4M3:
      return "fp8_e4m3";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view n) {
  if (n == "f32" || n == "float32" || n == "float") return DType::kF32;
  if (n == "f16" || n == "float16" || n == "half" || n == "fp16") return DType::kF16;
  if (n == "bf16" || n == "bfloat16") return DType::kBF16;
  if (n == "i8" || n == "int8") return DType::kI8;
  if (n == "i32" || n == "int32") return DType::kI32;
  if (n == "i64" || n == "int64") return DType::kI64;
  if (n == "fp8_e4m3" || n == "float8_e4m3fn") return DType::kFP8E4M3;
  return std::nullopt;
}

std::optional<DType> dtype_from_safetensors(std::string_view n) {
  if (n == "F32") return DType::kF32;
  if (n == "F16") return DType::kF16;
  if (n == "BF16") return DType::kBF16;
  if (n == "I8") return DType::kI8;
  if (n == "I32") return DType::kI32;
  if (n == "I64") return DType::kI64;
  if (n == "F8_E4M3") return DType::kFP8E4M3;
  return std::nullopt;
}

std::string_view dtype_safetensors_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI8:
      return "I8";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kFP8E4M3:
      return "F8_E4M3";
  }
  return "";
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: value = mant * 2^-24.
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;  // rounds to infinity
  if (a < 6.103515625e-05f) {                // subnormal range: quantise to multiples of 2^-24
    const auto m = static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
    return sign | m;
  }
  uint32_t bits = std::bit_cast<uint32_t>(a);
  // Round mantissa from 23 to 10 bits, nearest even.
  bits += 0xfffu + ((bits >> 13) & 1u);
  const uint32_t exp = (bits >> 23) - 112;
  return static_cast<uint16_t>(sign | (exp << 10) | ((bits >> 13) & 0x3ffu));
}

}  // namespace photon
