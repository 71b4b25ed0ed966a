// Rotary position embedding (rotate-half convention of Hugging Face Llama/Qwen) and the paged KV-cache write.
#include <cmath>

#include "cpu/kernels.hpp"

namespace photon::cpu {

void rope_cos_sin(const int32_t* positions, int64_t num_tokens, const float* inv_freq, int64_t half, float* cos,
                  float* sin) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      // transformers multiplies in float32; rounding the angle the same way keeps long positions in step with it.
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cos[t * half + i] = std::cos(angle);
      sin[t * half + i] = std::sin(angle);
    }
  }
}

void rope(float* x, int64_t num_tokens, int64_t heads, int64_t head_dim, int64_t ld, const float* cos,
          const float* sin) {
  const int64_t half = head_dim / 2;
#pragma omp parallel for schedule(static) if (num_tokens * heads * head_dim > 65536)
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + t * ld + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i];
        const float b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

void cache_write(const float* k, const float* v, int64_t ld, int64_t num_tokens, const PagedKv& kv) {
  const DType dtype = kv.element_bytes == 2 ? DType::kBF16 : DType::kF32;
  const size_t elem = dtype_size(dtype);
  const int32_t* slots = kv.slot_mapping;
  const int64_t kv_heads = kv.num_kv_heads;
  // Tokens have distinct slots, so they write apart.
#pragma omp parallel for schedule(static) if (num_tokens >= 16)
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (slots[t] < 0) continue;
    const int64_t block = slots[t] / kv.block_size;
    const int64_t offset = slots[t] % kv.block_size;
    for (int64_t h = 0; h < kv_heads; ++h) {
      for (int which = 0; which < 2; ++which) {
        const float* src = (which == 0 ? k : v) + t * ld + h * kv.head_dim;
        const int64_t index = (((block * 2 + which) * kv_heads + h) * kv.block_size + offset) * kv.head_dim;
        from_f32(src, kv.head_dim, dtype, static_cast<char*>(kv.cache) + static_cast<size_t>(index) * elem);
      }
    }
  }
}

}  // namespace photon::cpu
