// Causal grouped-query attention over a paged KV cache (CPU). Each (token, head) pair is independent: scores over
// the token's visible context, a max-subtracted softmax in f32, then the weighted sum of values.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/kernels.hpp"

namespace photon::cpu {
namespace {

template <typename T>
inline float load(const T* p, int64_t i) {
  if constexpr (sizeof(T) == 4) {
    return p[i];
  } else {
    return bf16_to_f32(p[i]);
  }
}

template <typename T>
void attention_impl(const float* q, int64_t heads, const PagedKv& kv, float scale, float* out) {
  const int32_t* query_start = kv.query_start;
  const int32_t* seq_lens = kv.seq_lens;
  const int32_t* block_indptr = kv.block_indptr;
  const int32_t* block_indices = kv.block_indices;
  const int32_t num_seqs = kv.num_seqs;
  const int64_t hd = kv.head_dim;
  const int64_t bs = kv.block_size;
  const int64_t kv_heads = kv.num_kv_heads;
  const int64_t group = heads / kv_heads;
  const int64_t num_tokens = query_start[num_seqs];
  const int64_t row = heads * hd;
  int32_t max_len = 0;
  for (int32_t s = 0; s < num_seqs; ++s) max_len = std::max(max_len, seq_lens[s]);
  const auto* cache = static_cast<const T*>(kv.cache);
  const int64_t block_stride = 2 * kv_heads * bs * hd;
  const int64_t v_offset = kv_heads * bs * hd;

#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(max_len));
    std::vector<float> acc(static_cast<size_t>(hd));
#pragma omp for schedule(dynamic, 4)
    for (int64_t job = 0; job < num_tokens * heads; ++job) {
      const int64_t t = job / heads;
      const int64_t h = job % heads;
      const int32_t s =
          static_cast<int32_t>(std::upper_bound(query_start, query_start + num_seqs + 1, t) - query_start - 1);
      const int64_t q_len = query_start[s + 1] - query_start[s];
      const int64_t pos = seq_lens[s] - q_len + (t - query_start[s]);
      const int32_t* blocks = block_indices + block_indptr[s];
      const int64_t kvh = h / group;
      const float* qv = q + t * row + h * hd;

      float max_score = -INFINITY;
      for (int64_t j = 0; j <= pos; ++j) {
        const T* kp = cache + blocks[j / bs] * block_stride + (kvh * bs + j % bs) * hd;
        float dot = 0.0f;
        for (int64_t d = 0; d < hd; ++d) dot += qv[d] * load(kp, d);
        scores[static_cast<size_t>(j)] = dot * scale;
        max_score = std::max(max_score, dot * scale);
      }
      float denom = 0.0f;
      for (int64_t j = 0; j <= pos; ++j) {
        const float e = std::exp(scores[static_cast<size_t>(j)] - max_score);
        scores[static_cast<size_t>(j)] = e;
        denom += e;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j <= pos; ++j) {
        const T* vp = cache + blocks[j / bs] * block_stride + v_offset + (kvh * bs + j % bs) * hd;
        const float p = scores[static_cast<size_t>(j)];
        for (int64_t d = 0; d < hd; ++d) acc[static_cast<size_t>(d)] += p * load(vp, d);
      }
      float* o = out + t * row + h * hd;
      const float inv = 1.0f / denom;
      for (int64_t d = 0; d < hd; ++d) o[d] = acc[static_cast<size_t>(d)] * inv;
    }
  }
}

}  // namespace

void paged_attention(const float* q, int64_t heads, const PagedKv& kv, float scale, float* out) {
  if (kv.element_bytes == 2) {
    attention_impl<uint16_t>(q, heads, kv, scale, out);
  } else {
    attention_impl<float>(q, heads, kv, scale, out);
  }
}

}  // namespace photon::cpu
