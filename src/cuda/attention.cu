// Causal GQA attention over the paged KV cache, for prompt chunks and decode tokens alike.
//
// Grid: (query token, query head, KV split). Each block walks its share of the token's visible keys in tiles of
// kTile: threads score whole keys (q in shared memory, K rows as 16-byte vectors), an online softmax keeps the
// running max and sum, then groups of threads own 8-dim slices of V (16-byte loads) and accumulate p * V for
// different keys at once, reduced across groups at the end. With one split the block writes the bf16 output;
// with several (flash-decoding, for few tokens over long contexts) it writes (max, sum, unnormalised output) and
// a second kernel merges the splits. f32 throughout.
#include "cuda/common.cuh"
#include "cuda/kernels.cuh"

namespace photon::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 128;
constexpr int kMaxHeadDim = 256;

// kVec: dims per thread in the PV stage, 8 (16-byte loads) when head_dim % 8 == 0, else 1. kHeadDim: the head
// dimension when known at compile time (fully unrolled loads), or 0.
template <int kVec, int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const uint16_t* q, const uint16_t* cache, const int32_t* query_start, const int32_t* seq_lens,
                     const int32_t* block_indptr, const int32_t* block_indices, const int32_t* tokens, int num_seqs,
                     int heads, int kv_heads, int head_dim, int block_size, float scale, int splits, uint16_t* out,
                     float* part_out, float* part_ml) {
  const int hd = kHeadDim > 0 ? kHeadDim : head_dim;
  __shared__ float qs[kMaxHeadDim];
  __shared__ float scores[kTile];
  __shared__ float scratch[32];
  __shared__ float partial[kThreads * (kVec == 8 ? 8 : 1)];
  __shared__ int seq_shared;
  const int t = tokens[blockIdx.x], h = blockIdx.y, split = blockIdx.z, tid = threadIdx.x;
  if (tid == 0) {  // the sequence of this token: the last s with query_start[s] <= t
    int lo = 0, hi = num_seqs - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (query_start[mid] <= t)
        lo = mid;
      else
        hi = mid - 1;
    }
    seq_shared = lo;
  }
  const int64_t row = static_cast<int64_t>(t) * heads * hd + static_cast<int64_t>(h) * hd;
  for (int d = tid; d < hd; d += kThreads) qs[d] = bf2f(q[row + d]) * scale;
  __syncthreads();
  const int s = seq_shared;
  const int ctx = seq_lens[s] - (query_start[s + 1] - query_start[s]) + (t - query_start[s]) + 1;
  const int per_split = (ctx + splits - 1) / splits;
  const int key_begin = split * per_split;
  const int key_end = min(ctx, key_begin + per_split);
  const int32_t* blocks = block_indices + block_indptr[s];
  const int kvh = h / (heads / kv_heads);
  const int64_t head_stride = static_cast<int64_t>(block_size) * hd;
  const int64_t block_stride = 2 * kv_heads * head_stride;
  const uint16_t* k_base = cache + kvh * head_stride;
  const uint16_t* v_base = cache + (kv_heads + kvh) * head_stride;

  const int lanes = hd / kVec;          // threads covering one key's V row
  const int groups = kThreads / lanes;  // keys accumulated at once
  const int group = tid / lanes, lane = tid % lanes;
  const bool active = group < groups;
  float acc[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) acc[e] = 0.0f;
  float running_max = -INFINITY, running_sum = 0.0f;

  for (int start = key_begin; start < key_end; start += kTile) {
    const int n = min(kTile, key_end - start);
    float tile_max = -INFINITY;
    for (int j = tid; j < n; j += kThreads) {
      const int key = start + j;
      const uint16_t* kp =
          k_base + blocks[key / block_size] * block_stride + static_cast<int64_t>(key % block_size) * hd;
      float dot = 0.0f;
      if ((hd & 7) == 0) {
#pragma unroll
        for (int d = 0; d < (kHeadDim > 0 ? kHeadDim : kMaxHeadDim); d += 8) {
          if (kHeadDim == 0 && d >= hd) break;
          const uint4 raw = *reinterpret_cast<const uint4*>(kp + d);
          const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            dot +=
                qs[d + 2 * e] * __uint_as_float(w[e] << 16) + qs[d + 2 * e + 1] * __uint_as_float(w[e] & 0xffff0000u);
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
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[e] *= alpha;
    if (active) {
      for (int j = group; j < n; j += groups) {
        const int key = start + j;
        const uint16_t* vp = v_base + blocks[key / block_size] * block_stride +
                             static_cast<int64_t>(key % block_size) * hd + lane * kVec;
        const float p = scores[j];
        if constexpr (kVec == 8) {
          const uint4 raw = *reinterpret_cast<const uint4*>(vp);
          const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc[2 * e] += p * __uint_as_float(w[e] << 16);
            acc[2 * e + 1] += p * __uint_as_float(w[e] & 0xffff0000u);
          }
        } else {
          acc[0] += p * bf2f(vp[0]);
        }
      }
    }
    __syncthreads();  // scores[] is rewritten by the next tile
  }
  // Reduce the groups: partial[group][dim].
  if (active) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) partial[group * hd + lane * kVec + e] = acc[e];
  }
  __syncthreads();
  for (int d = tid; d < hd; d += kThreads) {
    float v = 0.0f;
    for (int g = 0; g < groups; ++g) v += partial[g * hd + d];
    if (splits == 1) {
      out[row + d] = f2bf(running_sum > 0.0f ? v / running_sum : 0.0f);
    } else {
      part_out[((static_cast<int64_t>(blockIdx.x) * heads + h) * splits + split) * hd + d] = v;
    }
  }
  if (splits > 1 && tid == 0) {
    float* ml = part_ml + ((static_cast<int64_t>(blockIdx.x) * heads + h) * splits + split) * 2;
    ml[0] = running_max;
    ml[1] = running_sum;
  }
}

// Merges the splits of one (token, head): out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
__global__ void merge_splits_kernel(const float* part_out, const float* part_ml, const int32_t* tokens, int heads,
                                    int hd, int splits, uint16_t* out) {
  const int t = tokens[blockIdx.x], h = blockIdx.y;
  const int64_t base = (static_cast<int64_t>(blockIdx.x) * heads + h) * splits;
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, part_ml[(base + s) * 2]);
  float l = 0.0f;
  for (int s = 0; s < splits; ++s) l += part_ml[(base + s) * 2 + 1] * __expf(part_ml[(base + s) * 2] - m);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float w = part_ml[(base + s) * 2 + 1] > 0.0f ? __expf(part_ml[(base + s) * 2] - m) : 0.0f;
      v += part_out[(base + s) * hd + d] * w;
    }
    out[(static_cast<int64_t>(t) * heads + h) * hd + d] = f2bf(v / l);
  }
}

}  // namespace

int attention_splits(int num_tokens, int heads, int max_seq_len) {
  // Enough blocks to fill the GPU (about four per SM on 132 SMs), never splits shorter than one tile.
  const int blocks = num_tokens * heads;
  if (blocks == 0 || blocks >= 512) return 1;
  const int by_occupancy = (512 + blocks - 1) / blocks;
  const int by_length = (max_seq_len + kTile - 1) / kTile;
  return max(1, min(min(by_occupancy, by_length), 64));
}

size_t attention_workspace_floats(int num_tokens, int heads, int head_dim, int splits) {
  return splits <= 1 ? 0 : static_cast<size_t>(num_tokens) * heads * splits * (head_dim + 2);
}

void paged_attention(const uint16_t* q, const uint16_t* cache, const int32_t* query_start, const int32_t* seq_lens,
                     const int32_t* block_indptr, const int32_t* block_indices, const int32_t* tokens, int num_tokens,
                     int num_seqs, int heads, int kv_heads, int head_dim, int block_size, float scale, int splits,
                     float* workspace, uint16_t* out, cudaStream_t s) {
  if (num_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(heads), static_cast<unsigned>(splits));
  float* part_out = workspace;
  float* part_ml = workspace + static_cast<size_t>(num_tokens) * heads * splits * head_dim;
#define PHOTON_ATTENTION_LAUNCH(VEC, HD)                                                                              \
  attention_kernel<VEC, HD><<<grid, kThreads, 0, s>>>(q, cache, query_start, seq_lens, block_indptr, block_indices,   \
                                                      tokens, num_seqs, heads, kv_heads, head_dim, block_size, scale, \
                                                      splits, out, part_out, part_ml)
  if (head_dim == 64) {
    PHOTON_ATTENTION_LAUNCH(8, 64);
  } else if (head_dim == 128) {
    PHOTON_ATTENTION_LAUNCH(8, 128);
  } else if (head_dim % 8 == 0) {
    PHOTON_ATTENTION_LAUNCH(8, 0);
  } else {
    PHOTON_ATTENTION_LAUNCH(1, 0);
  }
#undef PHOTON_ATTENTION_LAUNCH
  if (splits > 1) {
    merge_splits_kernel<<<dim3(static_cast<unsigned>(num_tokens), static_cast<unsigned>(heads)), 128, 0, s>>>(
        part_out, part_ml, tokens, heads, head_dim, splits, out);
  }
}

}  // namespace photon::cuda
