// Device-side token selection for the CPU backend (the GPU's sample kernel, on the host).
#include <cmath>

#include "core/random.hpp"
#include "cpu/kernels.hpp"

namespace photon::cpu {

int32_t sample_row(const float* row, int64_t vocab, float temperature, float min_p, uint64_t seed, uint64_t index) {
  int32_t best_id = 0;
  if (temperature <= 0.0f) {
    for (int64_t i = 1; i < vocab; ++i) {
      if (row[i] > row[best_id]) best_id = static_cast<int32_t>(i);
    }
    return best_id;
  }
  float max_logit = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) max_logit = std::fmax(max_logit, row[i]);
  const float inv_t = 1.0f / temperature;
  const float log_min_p = min_p > 0.0f ? std::log(min_p) : -INFINITY;
  float best = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    const float scaled = (row[i] - max_logit) * inv_t;
    if (scaled < log_min_p) continue;
    const float v = scaled + gumbel(seed, index, static_cast<uint32_t>(i));
    if (v > best) {
      best = v;
      best_id = static_cast<int32_t>(i);
    }
  }
  return best_id;
}

}  // namespace photon::cpu
