// RMSNorm as Hugging Face computes it in float32: x * rsqrt(mean(x^2) + eps) * weight.
#include <cmath>

#include "cpu/kernels.hpp"

namespace photon::cpu {
namespace {

inline void norm_row(const float* x, const float* w, int64_t dim, float eps, float* out) {
  double ss = 0.0;  // double keeps long rows exact enough to match a float32 reference within rounding
  for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(dim)) + eps);
  for (int64_t i = 0; i < dim; ++i) out[i] = w[i] * (x[i] * inv);
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) {
#pragma omp parallel for schedule(static) if (rows * dim > 65536)
  for (int64_t r = 0; r < rows; ++r) norm_row(x + r * dim, w, dim, eps, out + r * dim);
}

void add_rms_norm(float* residual, const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) {
#pragma omp parallel for schedule(static) if (rows * dim > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    float* res = residual + r * dim;
    const float* xr = x + r * dim;
    for (int64_t i = 0; i < dim; ++i) res[i] += xr[i];
    norm_row(res, w, dim, eps, out + r * dim);
  }
}

}  // namespace photon::cpu
