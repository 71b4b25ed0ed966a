// Group-wise symmetric int8 quantization of weights on the CPU (see cpu/kernels.hpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/kernels.hpp"

namespace photon::cpu {

void quantize_int8(const void* w, DType dtype, int64_t n, int64_t k, int64_t group, int8_t* values, float* scales,
                   DType scale_dtype) {
  const int64_t groups = (k + group - 1) / group;
  const size_t esize = dtype_size(dtype);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      to_f32(static_cast<const char*>(w) + static_cast<size_t>(j * k) * esize, dtype, k, row.data());
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t begin = g * group, end = std::min(begin + group, k);
        float max_abs = 0.0f;
        for (int64_t c = begin; c < end; ++c) max_abs = std::max(max_abs, std::fabs(row[static_cast<size_t>(c)]));
        float scale = max_abs / 127.0f;
        if (scale_dtype != DType::kF32) {
          uint16_t stored = 0;
          from_f32(&scale, 1, scale_dtype, &stored);
          to_f32(&stored, scale_dtype, 1, &scale);
        }
        scales[j * groups + g] = scale;
        for (int64_t c = begin; c < end; ++c) {
          // Division, not a reciprocal product, so that the rounding matches torch's round(w / scale).
          const float q = scale == 0.0f ? 0.0f : std::nearbyint(row[static_cast<size_t>(c)] / scale);
          values[j * k + c] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
        }
      }
    }
  }
}

}  // namespace photon::cpu
