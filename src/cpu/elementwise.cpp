// Conversions and elementwise CPU kernels.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/kernels.hpp"

namespace photon::cpu {

void to_f32(const void* src, DType dtype, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    default:
      return;  // other dtypes never reach float kernels: the loader rejects them
  }
}

void from_f32(const float* src, int64_t n, DType dtype, void* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    default:
      return;
  }
}

void swiglu(const float* gate_up, int64_t rows, int64_t inter, int64_t ld, float* out, int64_t ldo) {
  // Over rows and columns together: a prompt's rows each hold intermediate_size values, a decode step's one row too.
#pragma omp parallel for collapse(2) schedule(static) if (rows * inter >= 4096)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < inter; ++i) {
      const float g = gate_up[r * ld + i];
      out[r * ldo + i] = g / (1.0f + std::exp(-g)) * gate_up[r * ld + inter + i];
    }
  }
}

void embed(const int32_t* ids, int64_t num_tokens, const int32_t* sampled, const void* table, DType table_dtype,
           int64_t rows, int64_t hidden, int64_t first_id, float* out, const float* scales, int64_t group) {
  const size_t row_bytes = static_cast<size_t>(hidden) * dtype_size(table_dtype);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t row = (ids[t] >= 0 ? ids[t] : sampled[-ids[t] - 1]) - first_id;
    if (row < 0 || row >= rows) {
      std::fill(out + t * hidden, out + (t + 1) * hidden, 0.0f);
      continue;
    }
    const char* src = static_cast<const char*>(table) + static_cast<size_t>(row) * row_bytes;
    if (table_dtype == DType::kI8) {
      const int64_t groups = (hidden + group - 1) / group;
      const auto* q = reinterpret_cast<const int8_t*>(src);
      for (int64_t c = 0; c < hidden; ++c)
        out[t * hidden + c] = static_cast<float>(q[c]) * scales[row * groups + c / group];
      continue;
    }
    to_f32(src, table_dtype, hidden, out + t * hidden);
  }
}

void gather_rows(const float* x, const int32_t* indices, int64_t count, int64_t dim, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    std::memmove(out + i * dim, x + static_cast<int64_t>(indices[i]) * dim, static_cast<size_t>(dim) * sizeof(float));
  }
}

}  // namespace photon::cpu
