// Causal grouped-query attention over a paged KV cache (CPU), flash-style: jobs of up to 16 query tokens of one
// sequence and every query head of one KV head walk the visible keys in blocks with an online softmax in f32, so
// each key and value is widened once per job for all its rows and no score matrix is formed. Each block's keys are
// stored transposed, so a row's scores are multiply-adds across keys rather than dot products ending in horizontal
// sums.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/exp.hpp"
#include "cpu/isa.hpp"
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

constexpr int64_t kQueryTile = 16;  // query tokens of one sequence per job
constexpr int64_t kKeyBlock = 64;   // keys widened to f32 at once

// A thread's buffers, sized for the largest job.
struct Scratch {
  std::vector<float> keys, values;  // [head_dim, kKeyBlock] (transposed), [kKeyBlock, head_dim]
  std::vector<float> max, sum;      // [rows]
  std::vector<float> acc;           // [rows, head_dim]
};

// One job: query tokens [t0, t1) of sequence s, every query head of KV head kvh (rows = tokens x group), flash-style:
// the visible keys go by in blocks of kKeyBlock, widened to f32 once for all rows; each row keeps a running maximum,
// the running sum of exp(score - maximum) and the weighted sum of values, rescaled when the maximum grows (no full
// score matrix). The loops are written for the vectoriser (across keys for the scores, the softmax and its
// reductions; across head_dim for the values); the caller compiles this body for each instruction set. HD > 0 fixes
// the head dimension at compile time (the common ones), so a row's output stays in registers while the keys go by;
// 0 reads it from kv.
template <typename T, int64_t HD>
inline void attention_tile(const float* q, int64_t heads, const PagedKv& kv, float scale, float* out, int32_t s,
                           int64_t kvh, int64_t t0, int64_t t1, Scratch& w) {
  const int64_t hd = HD > 0 ? HD : kv.head_dim, bs = kv.block_size, kv_heads = kv.num_kv_heads;
  const int64_t group = heads / kv_heads, row_width = heads * hd;
  const int64_t q_len = kv.query_start[s + 1] - kv.query_start[s];
  const int64_t first_pos = kv.seq_lens[s] - q_len - kv.query_start[s];  // position of token t = first_pos + t
  const int64_t rows = (t1 - t0) * group;
  const int32_t* blocks = kv.block_indices + kv.block_indptr[s];
  const auto* cache = static_cast<const T*>(kv.cache);
  const int64_t block_stride = 2 * kv_heads * bs * hd, v_offset = kv_heads * bs * hd;
  float* const kbuf = w.keys.data();
  float* const vbuf = w.values.data();
  for (int64_t r = 0; r < rows; ++r) {
    w.max[static_cast<size_t>(r)] = -INFINITY;
    w.sum[static_cast<size_t>(r)] = 0.0f;
  }
  std::fill(w.acc.begin(), w.acc.begin() + rows * hd, 0.0f);

  const int64_t last = first_pos + t1 - 1;  // the last key any row sees
  for (int64_t j0 = 0; j0 <= last; j0 += kKeyBlock) {
    const int64_t jn = std::min(kKeyBlock, last + 1 - j0);
    // Keys transposed ([d][key], so a row's scores are multiply-adds across keys, with no horizontal sums), values
    // as they are; keys past jn are zeros.
    for (int64_t jj = 0; jj < jn; ++jj) {
      const int64_t j = j0 + jj;
      const T* kp = cache + blocks[j / bs] * block_stride + (kvh * bs + j % bs) * hd;
      const T* vp = kp + v_offset;
      for (int64_t d = 0; d < hd; ++d) {
        kbuf[d * kKeyBlock + jj] = load(kp, d);
        vbuf[jj * hd + d] = load(vp, d);
      }
    }
    for (int64_t jj = jn; jj < kKeyBlock; ++jj)
      for (int64_t d = 0; d < hd; ++d) kbuf[d * kKeyBlock + jj] = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = t0 + r / group, h = kvh * group + r % group;
      const int64_t visible = std::min(jn, first_pos + t - j0 + 1);
      if (visible <= 0) continue;
      const float* qv = q + t * row_width + h * hd;
      alignas(64) float sc[kKeyBlock] = {};
      for (int64_t d = 0; d < hd; ++d) {
        const float qd = qv[d];
        const float* kd = kbuf + d * kKeyBlock;
#pragma omp simd
        for (int64_t jj = 0; jj < kKeyBlock; ++jj) sc[jj] += qd * kd[jj];
      }
      float block_max = -INFINITY;
#pragma omp simd reduction(max : block_max)
      for (int64_t jj = 0; jj < visible; ++jj) {
        sc[jj] *= scale;
        block_max = std::max(block_max, sc[jj]);
      }
      float& m = w.max[static_cast<size_t>(r)];
      float& l = w.sum[static_cast<size_t>(r)];
      float* acc = w.acc.data() + r * hd;
      const float m_new = std::max(m, block_max);
      if (m != -INFINITY && m_new != m) {
        const float correction = std::exp(m - m_new);
        l *= correction;
#pragma omp simd
        for (int64_t d = 0; d < hd; ++d) acc[d] *= correction;
      }
      m = m_new;
      float block_sum = 0.0f;
#pragma omp simd reduction(+ : block_sum)
      for (int64_t jj = 0; jj < visible; ++jj) {
        sc[jj] = exp_nonpositive(sc[jj] - m_new);
        block_sum += sc[jj];
      }
      l += block_sum;
      if constexpr (HD > 0) {
        alignas(64) float a[HD];
        for (int64_t d = 0; d < HD; ++d) a[d] = acc[d];
        for (int64_t jj = 0; jj < visible; ++jj) {
          const float p = sc[jj];
          const float* vr = vbuf + jj * HD;
#pragma omp simd
          for (int64_t d = 0; d < HD; ++d) a[d] += p * vr[d];
        }
        for (int64_t d = 0; d < HD; ++d) acc[d] = a[d];
      } else {
        for (int64_t jj = 0; jj < visible; ++jj) {
          const float p = sc[jj];
          const float* vr = vbuf + jj * hd;
#pragma omp simd
          for (int64_t d = 0; d < hd; ++d) acc[d] += p * vr[d];
        }
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = t0 + r / group, h = kvh * group + r % group;
    const float inv = 1.0f / w.sum[static_cast<size_t>(r)];
    const float* acc = w.acc.data() + r * hd;
    float* o = out + t * row_width + h * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] = acc[d] * inv;
  }
}

// The tile compiled for each path (flatten inlines the body, so its loops are vectorised for the target).
template <typename T, int64_t HD>
__attribute__((target("avx512f,avx512bw,avx512vl,fma"), flatten)) void tile_avx512(const float* q, int64_t heads,
                                                                                   const PagedKv& kv, float scale,
                                                                                   float* out, int32_t s, int64_t kvh,
                                                                                   int64_t t0, int64_t t1, Scratch& w) {
  attention_tile<T, HD>(q, heads, kv, scale, out, s, kvh, t0, t1, w);
}
template <typename T, int64_t HD>
__attribute__((target("avx2,fma,f16c"), flatten)) void tile_avx2(const float* q, int64_t heads, const PagedKv& kv,
                                                                 float scale, float* out, int32_t s, int64_t kvh,
                                                                 int64_t t0, int64_t t1, Scratch& w) {
  attention_tile<T, HD>(q, heads, kv, scale, out, s, kvh, t0, t1, w);
}
template <typename T, int64_t HD>
void tile_portable(const float* q, int64_t heads, const PagedKv& kv, float scale, float* out, int32_t s, int64_t kvh,
                   int64_t t0, int64_t t1, Scratch& w) {
  attention_tile<T, HD>(q, heads, kv, scale, out, s, kvh, t0, t1, w);
}

template <typename T, int64_t HD>
auto tile_for_isa() {
  return active_isa() >= Isa::kAvx512 ? &tile_avx512<T, HD>
         : active_isa() == Isa::kAvx2 ? &tile_avx2<T, HD>
                                      : &tile_portable<T, HD>;
}

// Jobs: (sequence, query tile of kQueryTile tokens, KV head), spread dynamically over threads (their costs differ
// with the context each tile sees).
template <typename T>
void attention_impl(const float* q, int64_t heads, const PagedKv& kv, float scale, float* out) {
  const auto tile = kv.head_dim == 64    ? tile_for_isa<T, 64>()
                    : kv.head_dim == 128 ? tile_for_isa<T, 128>()
                                         : tile_for_isa<T, 0>();
  const int64_t kv_heads = kv.num_kv_heads, group = heads / kv_heads, hd = kv.head_dim;
  std::vector<int64_t> job_start = {0};  // jobs of sequence s: [job_start[s], job_start[s + 1])
  for (int32_t s = 0; s < kv.num_seqs; ++s) {
    const int64_t q_len = kv.query_start[s + 1] - kv.query_start[s];
    job_start.push_back(job_start.back() + (q_len + kQueryTile - 1) / kQueryTile * kv_heads);
  }
  const int64_t jobs = job_start.back();
#pragma omp parallel
  {
    Scratch w;
    w.keys.resize(static_cast<size_t>(kKeyBlock * hd));
    w.values.resize(static_cast<size_t>(kKeyBlock * hd));
    w.max.resize(static_cast<size_t>(kQueryTile * group));
    w.sum.resize(static_cast<size_t>(kQueryTile * group));
    w.acc.resize(static_cast<size_t>(kQueryTile * group * hd));
#pragma omp for schedule(dynamic, 1)
    for (int64_t job = 0; job < jobs; ++job) {
      const auto s =
          static_cast<int32_t>(std::upper_bound(job_start.begin(), job_start.end(), job) - job_start.begin() - 1);
      const int64_t local = job - job_start[static_cast<size_t>(s)];
      const int64_t t0 = kv.query_start[s] + local / kv_heads * kQueryTile;
      const int64_t t1 = std::min<int64_t>(t0 + kQueryTile, kv.query_start[s + 1]);
      tile(q, heads, kv, scale, out, s, local % kv_heads, t0, t1, w);
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
