// Causal GQA attention over the paged KV cache, for prompt chunks and decode tokens alike.
//
// One block per (query token, query head). The token's visible context is walked in tiles of kTile keys: each
// thread scores whole keys (q from shared memory, K rows read as 16-byte vectors where head_dim allows), the tile's
// max and sum update an online softmax, then threads own output dimensions and accumulate p * V with coalesced
// reads. f32 throughout; the output is rounded to bf16 once.
#include "cuda/common.cuh"
#include "cuda/kernels.cuh"

namespace photon::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 256;
constexpr int kMaxHeadDim = 256;

__global__ void __launch_bounds__(kThreads) paged_attention_kernel(
    const uint16_t* q, const uint16_t* cache, const int32_t* query_start, const int32_t* seq_lens,
    const int32_t* block_indptr, const int32_t* block_indices, int num_seqs, int heads, int kv_heads, int hd,
    int block_size, float scale, uint16_t* out) {
  __shared__ float qs[kMaxHeadDim];
  __shared__ float scores[kTile];
  __shared__ float scratch[32];
  __shared__ float partial[kThreads * 2];
  __shared__ int seq_shared;
  const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  if (tid == 0) {  // the sequence this token belongs to: the last s with query_start[s] <= t
    int lo = 0, hi = num_seqs - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (query_start[mid] <= t) lo = mid; else hi = mid - 1;
    }
    seq_shared = lo;
  }
  const int64_t row = static_cast<int64_t>(t) * heads * hd + static_cast<int64_t>(h) * hd;
  for (int d = tid; d < hd; d += kThreads) qs[d] = bf2f(q[row + d]) * scale;
  __syncthreads();
  const int s = seq_shared;
  const int q_len = query_start[s + 1] - query_start[s];
  const int ctx = seq_lens[s] - q_len + (t - query_start[s]) + 1;  // keys 0..pos
  const int32_t* blocks = block_indices + block_indptr[s];
  const int kvh = h / (heads / kv_heads);
  const int64_t head_stride = static_cast<int64_t>(block_size) * hd;
  const int64_t block_stride = 2 * kv_heads * head_stride;

  // Output ownership: groups of hd threads split the keys of a tile; hd > 128 gives each thread two dims.
  const int groups = hd <= kThreads ? kThreads / hd : 1;
  const int group = hd <= kThreads ? tid / hd : 0;
  const int d0 = hd <= kThreads ? tid % hd : tid;
  const bool owns = group < groups && d0 < hd;
  const bool owns2 = hd > kThreads && tid + kThreads < hd;
  float acc0 = 0.0f, acc1 = 0.0f, running_max = -INFINITY, running_sum = 0.0f;

  for (int start = 0; start < ctx; start += kTile) {
    const int n = min(kTile, ctx - start);
    float tile_max = -INFINITY;
    for (int j = tid; j < n; j += kThreads) {
      const int key = start + j;
      const uint16_t* kp = cache + blocks[key / block_size] * block_stride + kvh * head_stride +
                           static_cast<int64_t>(key % block_size) * hd;
      float dot = 0.0f;
      if ((hd & 7) == 0) {
        for (int d = 0; d < hd; d += 8) {
          const uint4 raw = *reinterpret_cast<const uint4*>(kp + d);
          const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            dot += qs[d + 2 * e] * __uint_as_float(w[e] << 16) + qs[d + 2 * e + 1] * __uint_as_float(w[e] & 0xffff0000u);
          }
        }
      } else {
        for (int d = 0; d < hd; ++d) dot += qs[d] * bf2f(kp[d]);
      }
      scores[j] = dot;
      tile_max = fmaxf(tile_max, dot);
    }
    tile_max = block_max(tile_max, scratch);
    const float new_max = fmaxf(running_max, tile_max);
    const float alpha = __expf(running_max - new_max);  // 0 on the first tile
    float tile_sum = 0.0f;
    for (int j = tid; j < n; j += kThreads) {
      const float p = __expf(scores[j] - new_max);
      scores[j] = p;
      tile_sum += p;
    }
    tile_sum = block_sum(tile_sum, scratch);  // its barriers also publish scores[]
    running_sum = running_sum * alpha + tile_sum;
    running_max = new_max;
    acc0 *= alpha;
    acc1 *= alpha;
    if (owns) {
      const uint16_t* vbase = cache + kv_heads * head_stride + kvh * head_stride;
      for (int j = group; j < n; j += groups) {
        const int key = start + j;
        const uint16_t* vp = vbase + blocks[key / block_size] * block_stride + static_cast<int64_t>(key % block_size) * hd;
        const float p = scores[j];
        acc0 += p * bf2f(vp[d0]);
        if (owns2) acc1 += p * bf2f(vp[d0 + kThreads]);
      }
    }
    __syncthreads();  // scores[] is rewritten by the next tile
  }
  partial[tid] = owns ? acc0 : 0.0f;
  partial[kThreads + tid] = owns2 ? acc1 : 0.0f;
  __syncthreads();
  const float inv = 1.0f / running_sum;
  for (int d = tid; d < hd; d += kThreads) {
    float v = 0.0f;
    if (hd <= kThreads) {
      for (int g = 0; g < groups; ++g) v += partial[g * hd + d];
    } else {
      v = d < kThreads ? partial[d] : partial[kThreads + d - kThreads];
    }
    out[row + d] = f2bf(v * inv);
  }
}

}  // namespace

void paged_attention(const uint16_t* q, const uint16_t* cache, const int32_t* query_start, const int32_t* seq_lens,
                     const int32_t* block_indptr, const int32_t* block_indices, int num_seqs, int num_tokens,
                     int heads, int kv_heads, int head_dim, int block_size, float scale, uint16_t* out,
                     cudaStream_t s) {
  if (num_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(heads));
  paged_attention_kernel<<<grid, kThreads, 0, s>>>(q, cache, query_start, seq_lens, block_indptr, block_indices,
                                                   num_seqs, heads, kv_heads, head_dim, block_size, scale, out);
}

}  // namespace photon::cuda
