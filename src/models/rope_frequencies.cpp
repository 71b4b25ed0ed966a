#include "models/rope_frequencies.hpp"

#include <cmath>
#include <numbers>

namespace photon {

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(rope.theta), exponent);
  }
  if (rope.type == RopeType::kLinear) {
    for (float& f : inv) f = static_cast<float>(f / rope.factor);
  } else if (rope.type == RopeType::kLlama3) {
    const double old_len = static_cast<double>(rope.original_max_position_embeddings);
    const double low_freq_wavelen = old_len / rope.low_freq_factor;
    const double high_freq_wavelen = old_len / rope.high_freq_factor;
    for (float& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_freq_wavelen) continue;  // high frequencies are kept
      if (wavelen > low_freq_wavelen) {           // low frequencies are divided by the factor
        f = static_cast<float>(f / rope.factor);
        continue;
      }
      // In between, interpolate smoothly between the two.
      const double smooth = (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
      f = static_cast<float>((1.0 - smooth) * f / rope.factor + smooth * f);
    }
  }
  return inv;
}

}  // namespace photon
