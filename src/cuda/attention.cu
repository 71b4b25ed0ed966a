// Causal GQA attention over the paged KV cache, for decode tokens and short chunks.
//
// Grid: (query token, group of G query heads sharing one KV head, KV split). Each block reads its KV head's visible
// keys once for all G query heads (GQA: 4x less cache traffic than a block per query head on Llama 3), in tiles of
// kTile: threads score whole keys against the G queries (q in shared memory, K rows as 16-byte vectors), an online
// softmax per head keeps the running max and sum, then groups of threads own 8-dim slices of V (16-byte loads) and
// accumulate p * V for different keys at once, reduced across groups at the end. With one split the block writes the
// bf16 output; with several (flash-decoding, for few tokens over long contexts) it writes (max, sum, unnormalised
// output) per head, and the last split block of a (token, head group) to finish — counted with an atomic in the
// workspace — merges them, so a decode step needs no second kernel. Splits are fixed per launch (graphs): a context
// takes one split per kSplitKeys keys up to that count and leaves the rest empty (those blocks leave at once). A
// split of at most kPreloadKeys keys copies them into shared memory first, the cached ones before the PDL wait.
// f32 throughout.
#include "cuda/common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"

namespace photon::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 128;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxPartialRows = 2048;  // (token, head, split) partials the workspace holds
constexpr int kMaxSplits = 64;
// Keys per split while the launch has splits to spare: short splits keep a batch-1 decode step's attention a few
// dependent loads long (at 384 keys, 12 splits of 32 keys took 9 µs per layer where 3 splits of 128 took 14).
constexpr int kSplitKeys = 32;
constexpr int kPreloadKeys = 64;  // splits up to this long are copied into shared memory first

// Query heads per block: the largest of 8, 4, 2, 1 dividing the GQA ratio (head dims without a specialised kernel: 1).
int group_size(int heads, int kv_heads, int head_dim) {
  const int ratio = heads / kv_heads;
  if (head_dim != 64 && head_dim != 128) return 1;
  for (int g : {8, 4, 2}) {
    if (ratio % g == 0) return g;
  }
  return 1;
}

// Where 16-byte vector c of preloaded key row r sits in shared memory (in vectors): each thread scores a whole key,
// so the rows of a quarter-warp, 128 or 256 bytes apart, would all fall on the same banks; XOR-ing the vector index
// with the row's low bits spreads them over eight bank groups (head dims with >= 8 vectors per row).
__device__ __forceinline__ int swizzled(int r, int c, int hd) { return r * (hd / 8) + (c ^ (r & 7)); }

// Block-wide max (kMax) or sum of G values at once; every thread gets the results. Contains barriers.
template <int G, bool kMax>
__device__ __forceinline__ void block_reduce(float (&v)[G], float (*scratch)[G]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int g = 0; g < G; ++g) v[g] = kMax ? warp_max(v[g]) : warp_sum(v[g]);
  __syncthreads();  // scratch is free (its previous readers are done)
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) scratch[warp][g] = v[g];
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float r = scratch[0][g];
    for (int w = 1; w < kThreads / 32; ++w) r = kMax ? fmaxf(r, scratch[w][g]) : r + scratch[w][g];
    v[g] = r;
  }
}

// kVec: dims per thread in the PV stage, 8 (16-byte loads) when head_dim % 8 == 0, else 1. kHeadDim: the head
// dimension when known at compile time (fully unrolled loads), or 0. G: query heads per block.
// kPreload (head dims 64 and 128): a split of at most kPreloadKeys keys copies its keys and values into shared
// memory first — the cached ones before the PDL wait (no kernel of this step writes them), this step's after it —
// so that only one round of loads (q and the newest keys) follows the wait.
template <int kVec, int kHeadDim, int G, bool kPreload>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const uint16_t* q, int heads, PagedKv kv, const int32_t* tokens, float scale, int splits,
                     uint16_t* out, float* part_out, float* part_ml, unsigned* arrivals) {
  const uint16_t* cache = static_cast<const uint16_t*>(kv.cache);
  const int32_t *query_start = kv.query_start, *seq_lens = kv.seq_lens;
  const int32_t *block_indptr = kv.block_indptr, *block_indices = kv.block_indices;
  const int num_seqs = kv.num_seqs, kv_heads = kv.num_kv_heads, head_dim = kv.head_dim, block_size = kv.block_size;
  const int hd = kHeadDim > 0 ? kHeadDim : head_dim;
  __shared__ float qs[G][kMaxHeadDim];
  __shared__ float scores[G][kTile];
  __shared__ float scratch[kThreads / 32][G];
  // The groups' partial outputs at the end, and before them (kPreload) the split's keys and values: one pool.
  constexpr int kPartialFloats = G * kThreads * (kVec == 8 ? 8 : 1);
  constexpr int kPreloadElems = kPreload ? kPreloadKeys * kHeadDim : 0;  // per K and V, bf16
  constexpr int kPoolBytes = kPartialFloats * 4 > 4 * kPreloadElems ? kPartialFloats * 4 : 4 * kPreloadElems;
  __shared__ __align__(16) unsigned char pool[kPoolBytes];
  auto partial = reinterpret_cast<float(*)[kThreads * (kVec == 8 ? 8 : 1)]>(pool);
  uint16_t* const pre_k = reinterpret_cast<uint16_t*>(pool);
  uint16_t* const pre_v = pre_k + kPreloadElems;
  __shared__ int seq_shared;
  const int t = tokens[blockIdx.x], h0 = blockIdx.y * G, split = blockIdx.z, tid = threadIdx.x;
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
  __syncthreads();
  // The batch description is the step's input, uploaded before its first kernel: read while the kernel before this
  // one (which writes q and the newest keys) finishes.
  const int s = seq_shared;
  // Keys before `cached_end` were written by earlier steps; this step's tokens write the rest. Token t sees the
  // cached keys and this step's up to itself.
  const int cached_end = seq_lens[s] - (query_start[s + 1] - query_start[s]);
  const int ctx = cached_end + (t - query_start[s]) + 1;
  const int32_t* blocks = block_indices + block_indptr[s];
  // Splits are fixed per launch (a graph replays them for every context length); contexts too short to give each
  // split kSplitKeys keys use fewer of them. The empty ones leave at once (no partials, no arrival: the merge
  // counts the live splits), and a single live split writes the output itself.
  const int live = min(splits, (ctx + kSplitKeys - 1) / kSplitKeys);
  if (split >= live) return;
  const bool direct = live == 1;
  const int per_split = (ctx + live - 1) / live;
  const int key_begin = split * per_split;
  const int key_end = min(ctx, key_begin + per_split);
  const int kvh = h0 / (heads / kv_heads);
  const int64_t head_stride = static_cast<int64_t>(block_size) * hd;
  const int64_t block_stride = 2 * kv_heads * head_stride;
  const uint16_t* k_base = cache + kvh * head_stride;
  const uint16_t* v_base = cache + (kv_heads + kvh) * head_stride;
  const auto key_offset = [=](int key) {
    return blocks[key / block_size] * block_stride + static_cast<int64_t>(key % block_size) * hd;
  };
  const bool preload = kPreload && key_end - key_begin <= kPreloadKeys;
  // Copies the split's cached keys (before cached_end) or this step's (from it) into shared memory.
  const auto copy_keys = [=](bool cached) {
    const int from = cached ? key_begin : max(key_begin, cached_end);
    const int to = cached ? min(key_end, cached_end) : key_end;
    const int vecs = hd / 8;
    for (int i = (from - key_begin) * vecs + tid; i < (to - key_begin) * vecs; i += kThreads) {
      const int row = i / vecs, c = i % vecs;
      const int64_t at = key_offset(key_begin + row) + c * 8;
      cp_async16(pre_k + swizzled(row, c, hd) * 8, k_base + at);
      cp_async16(pre_v + i * 8, v_base + at);
    }
    cp_async_commit();
  };
  if (preload) copy_keys(true);
  pdl_begin();
  if (preload) copy_keys(false);
  const int64_t row = static_cast<int64_t>(t) * heads * hd + static_cast<int64_t>(h0) * hd;  // head h0's q/out
  for (int i = tid; i < G * hd; i += kThreads) qs[i / hd][i % hd] = bf2f(q[row + i]) * scale;
  if (preload) cp_async_wait<0>();
  __syncthreads();

  const int lanes = hd / kVec;          // threads covering one key's V row
  const int groups = kThreads / lanes;  // keys accumulated at once
  const int group = tid / lanes, lane = tid % lanes;
  const bool active = group < groups;
  float acc[G][kVec];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[g][e] = 0.0f;
  float running_max[G], running_sum[G];
#pragma unroll
  for (int g = 0; g < G; ++g) running_max[g] = -INFINITY, running_sum[g] = 0.0f;

  for (int start = key_begin; start < key_end; start += kTile) {
    const int n = min(kTile, key_end - start);
    float tile_max[G];
#pragma unroll
    for (int g = 0; g < G; ++g) tile_max[g] = -INFINITY;
    for (int j = tid; j < n; j += kThreads) {
      const int key = start + j;
      const uint16_t* kp = preload ? pre_k : k_base + key_offset(key);
      const int k_row = preload ? key - key_begin : 0;
      float dot[G];
#pragma unroll
      for (int g = 0; g < G; ++g) dot[g] = 0.0f;
      if ((hd & 7) == 0) {
        // Partly unrolled: fully unrolled, the compiler keeps all of q in registers across keys and spills.
#pragma unroll 4
        for (int d = 0; d < (kHeadDim > 0 ? kHeadDim : kMaxHeadDim); d += 8) {
          if (kHeadDim == 0 && d >= hd) break;
          const uint4 raw = *reinterpret_cast<const uint4*>(kp + (preload ? swizzled(k_row, d / 8, hd) * 8 : d));
          const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float lo = __uint_as_float(w[e] << 16), hi = __uint_as_float(w[e] & 0xffff0000u);
#pragma unroll
            for (int g = 0; g < G; ++g) dot[g] += qs[g][d + 2 * e] * lo + qs[g][d + 2 * e + 1] * hi;
          }
        }
      } else {
        for (int d = 0; d < hd; ++d) {
          const float kval = bf2f(kp[d]);
#pragma unroll
          for (int g = 0; g < G; ++g) dot[g] += qs[g][d] * kval;
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        scores[g][j] = dot[g];
        tile_max[g] = fmaxf(tile_max[g], dot[g]);
      }
    }
    block_reduce<G, true>(tile_max, scratch);
    float alpha[G], tile_sum[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float new_max = fmaxf(running_max[g], tile_max[g]);
      alpha[g] = __expf(running_max[g] - new_max);  // 0 on the first tile
      running_max[g] = new_max;
      tile_sum[g] = 0.0f;
    }
    for (int j = tid; j < n; j += kThreads) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float p = __expf(scores[g][j] - running_max[g]);
        scores[g][j] = p;
        tile_sum[g] += p;
      }
    }
    block_reduce<G, false>(tile_sum, scratch);  // its barriers also publish scores[]
#pragma unroll
    for (int g = 0; g < G; ++g) {
      running_sum[g] = running_sum[g] * alpha[g] + tile_sum[g];
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[g][e] *= alpha[g];
    }
    if (active) {
#pragma unroll 4
      for (int j = group; j < n; j += groups) {  // unrolled: several V rows in flight per thread
        const int key = start + j;
        const uint16_t* vp = (preload ? pre_v + (key - key_begin) * hd : v_base + key_offset(key)) + lane * kVec;
        if constexpr (kVec == 8) {
          const uint4 raw = *reinterpret_cast<const uint4*>(vp);
          const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int g = 0; g < G; ++g) {
            const float p = scores[g][j];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              acc[g][2 * e] += p * __uint_as_float(w[e] << 16);
              acc[g][2 * e + 1] += p * __uint_as_float(w[e] & 0xffff0000u);
            }
          }
        } else {
          const float v = bf2f(vp[0]);
#pragma unroll
          for (int g = 0; g < G; ++g) acc[g][0] += scores[g][j] * v;
        }
      }
    }
    __syncthreads();  // scores[] is rewritten by the next tile
  }
  // Reduce the groups: partial[head][group][dim]. The softmax state goes through shared memory so that the loops
  // below index it by a run-time head.
  __shared__ float final_max[G], final_sum[G];
  if (tid == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) final_max[g] = running_max[g], final_sum[g] = running_sum[g];
  }
  if (active) {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int e = 0; e < kVec; ++e) partial[g][group * hd + lane * kVec + e] = acc[g][e];
  }
  __syncthreads();
  for (int i = tid; i < G * hd; i += kThreads) {
    const int g = i / hd, d = i % hd;
    float v = 0.0f;
    for (int k = 0; k < groups; ++k) v += partial[g][k * hd + d];
    if (direct) {
      out[row + i] = f2bf(final_sum[g] > 0.0f ? v / final_sum[g] : 0.0f);
    } else {
      part_out[((static_cast<int64_t>(blockIdx.x) * heads + h0 + g) * splits + split) * hd + d] = v;
    }
  }
  if (direct) return;
  if (tid < G) {
    float* ml = part_ml + ((static_cast<int64_t>(blockIdx.x) * heads + h0 + tid) * splits + split) * 2;
    ml[0] = final_max[tid];
    ml[1] = final_sum[tid];
  }

  // The last split block of this (token, head group) merges: out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
  __shared__ bool last;
  __threadfence();  // this block's partials are visible before its arrival is counted
  __syncthreads();
  if (tid == 0) {
    unsigned* count = arrivals + blockIdx.x * gridDim.y + blockIdx.y;
    last = atomicAdd(count, 1u) == static_cast<unsigned>(live - 1);
    if (last) *count = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  __shared__ float weight[G][kMaxSplits];
  __shared__ float total[G];
  const int warp = tid >> 5, warp_lane = tid & 31;
  for (int g = warp; g < G; g += kThreads / 32) {
    const float* ml = part_ml + (static_cast<int64_t>(blockIdx.x) * heads + h0 + g) * splits * 2;
    float m = -INFINITY;
    for (int sp = warp_lane; sp < live; sp += 32) m = fmaxf(m, __ldcg(ml + 2 * sp));
    m = warp_max(m);
    float l = 0.0f;
    for (int sp = warp_lane; sp < live; sp += 32) {
      const float ls = __ldcg(ml + 2 * sp + 1);
      const float w = ls > 0.0f ? __expf(__ldcg(ml + 2 * sp) - m) : 0.0f;
      weight[g][sp] = w;
      l += ls * w;
    }
    l = warp_sum(l);
    if (warp_lane == 0) total[g] = l;
  }
  __syncthreads();
  for (int i = tid; i < G * hd; i += kThreads) {
    const int g = i / hd, d = i % hd;
    const float* po = part_out + (static_cast<int64_t>(blockIdx.x) * heads + h0 + g) * splits * hd + d;
    float v = 0.0f;
#pragma unroll 8
    for (int sp = 0; sp < live; ++sp) v += __ldcg(po + static_cast<int64_t>(sp) * hd) * weight[g][sp];
    out[row + i] = f2bf(v / total[g]);
  }
}

}  // namespace

int attention_splits(int num_tokens, int heads, int kv_heads, int head_dim, int max_seq_len) {
  // Enough blocks to fill the GPU (about four per SM on 132 SMs), no more than the longest context gives splits of
  // kSplitKeys keys, and no more partials than the workspace holds.
  const int blocks = num_tokens * (heads / group_size(heads, kv_heads, head_dim));
  if (blocks == 0 || blocks >= 512) return 1;
  const int by_occupancy = (512 + blocks - 1) / blocks;
  const int by_length = (max_seq_len + kSplitKeys - 1) / kSplitKeys;
  const int by_workspace = kMaxPartialRows / (num_tokens * heads);
  return max(1, min(min(by_occupancy, by_length), min(kMaxSplits, by_workspace)));
}

size_t attention_workspace_floats(int max_head_dim) {
  // Arrival counters (one per (token, head group), at most one per partial row), then the partials.
  return static_cast<size_t>(kMaxPartialRows) * (max_head_dim + 3);
}

void paged_attention(const uint16_t* q, int heads, const PagedKv& kv, const int32_t* tokens, int num_tokens,
                     float scale, int splits, float* workspace, uint16_t* out, cudaStream_t s) {
  if (num_tokens == 0) return;
  const int head_dim = kv.head_dim;
  const int group = group_size(heads, kv.num_kv_heads, head_dim);
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(heads / group),
                  static_cast<unsigned>(splits));
  auto* arrivals = reinterpret_cast<unsigned*>(workspace);
  float* part_out = workspace + kMaxPartialRows;
  float* part_ml = part_out + static_cast<size_t>(num_tokens) * heads * splits * head_dim;
  const bool preload = splits > 1;  // splits of few keys exist only then
#define PHOTON_ATTENTION_LAUNCH(VEC, HD, G, PRE)                                                                      \
  launch(attention_kernel<VEC, HD, G, PRE>, grid, kThreads, 0, s, q, heads, kv, tokens, scale, splits, out, part_out, \
         part_ml, arrivals)
#define PHOTON_ATTENTION_PRELOAD(HD, G)       \
  if (preload) {                              \
    PHOTON_ATTENTION_LAUNCH(8, HD, G, true);  \
  } else {                                    \
    PHOTON_ATTENTION_LAUNCH(8, HD, G, false); \
  }
#define PHOTON_ATTENTION_GROUPS(HD)    \
  switch (group) {                     \
    case 8:                            \
      PHOTON_ATTENTION_PRELOAD(HD, 8); \
      break;                           \
    case 4:                            \
      PHOTON_ATTENTION_PRELOAD(HD, 4); \
      break;                           \
    case 2:                            \
      PHOTON_ATTENTION_PRELOAD(HD, 2); \
      break;                           \
    default:                           \
      PHOTON_ATTENTION_PRELOAD(HD, 1); \
  }
  if (head_dim == 64) {
    PHOTON_ATTENTION_GROUPS(64);
  } else if (head_dim == 128) {
    PHOTON_ATTENTION_GROUPS(128);
  } else if (head_dim % 8 == 0) {
    PHOTON_ATTENTION_LAUNCH(8, 0, 1, false);
  } else {
    PHOTON_ATTENTION_LAUNCH(1, 0, 1, false);
  }
#undef PHOTON_ATTENTION_PRELOAD
#undef PHOTON_ATTENTION_GROUPS
#undef PHOTON_ATTENTION_LAUNCH
}

}  // namespace photon::cuda
