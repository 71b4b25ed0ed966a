// Causal GQA attention over the paged KV cache, for decode tokens and short chunks.
//
// Grid: (query token, group of G query heads sharing one KV head, KV split). Each block reads its KV head's visible
// keys once for all G query heads (GQA: 4x less cache traffic than a block per query head on Llama 3), with an
// online softmax per head (running max and sum). With one split the block writes the bf16 output; with several
// (flash-decoding, for few tokens over long contexts) the splits' (max, sum, unnormalised output) per head are merged
// without a second kernel: on Hopper and later the splits of a (token, head group) run as one thread block cluster
// and merge through each other's shared memory (cluster_finish; up to 16 splits); elsewhere each writes them to the
// workspace and the last split block to finish — counted with an atomic there — merges them (finish_pooled). Splits
// are fixed per launch (graphs): a context takes as many as its length asks for (kSplitKeys) up to that count and
// leaves the rest empty (those blocks leave at once, or, in a cluster, after its barriers).
//
// Head dimensions 64 and 128 (every supported model) take the tensor-core kernel: a split's keys are cut into tiles
// of 16 that the block's four warps take in turn, each warp running its own online softmax and streaming its tiles
// through a ring of two or three shared-memory slots (cp.async), so that its next tiles are in flight while it works
// on one and no block-wide barrier stands between tiles; the warps' states are combined at the end. The cached keys
// of each warp's first tiles are requested before the PDL wait, the newest (this step's) after it. Per tile,
// S = Q K^T and O += P V run on mma.sync with the G query heads as the rows of the A operand and P rounded to bf16,
// as FlashAttention does: a few instructions per key where f32 SIMT code needed dozens.
// Other head dimensions take a plain f32 kernel that reads the cache as it goes, one thread per key, in block-wide
// tiles. Accumulation is f32 throughout.
#include <cooperative_groups.h>

#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"
#include "cuda/mma.cuh"

namespace photon::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxPartialRows = 2048;  // (token, head, split) partials the workspace holds
constexpr int kMaxSplits = 64;
// Splits of one (token, head group) that merge through distributed shared memory: a thread block cluster of at most
// 16 blocks (the largest Hopper schedules, as a non-portable size).
constexpr int kMaxClusterSplits = 16;
// How a context of n keys is split: into max(ceil(n / split_keys), min(kShortSplits, ceil(n / kSplitKeys))) splits,
// at most live_splits and the launch's count (graphs fix that count for every context they replay). Short contexts take
// up to 16 splits of kSplitKeys keys or more, which keeps a batch-1 step's attention a few dependent loads long (at 384
// keys, 12 splits of 32 keys took 9 µs a layer where 3 splits of 128 took 14); longer ones splits of split_keys
// (128 for the tensor-core kernel), each split adding partials to merge, and for head dim 128 at most 32
// splits (live_splits), whose 8 KB tiles stream better in longer splits (one sequence of 2,048 / 8,192 / 32,768 keys,
// qwen3-0.6b's shape: 7.1 / 14.4 / 37.4 µs a layer against 12.9 / 19.5 / 44.6 in splits of 32 keys, up to 64).
constexpr int kSplitKeys = 32;
constexpr int kShortSplits = 16;
constexpr int kWarps = kThreads / 32;

// The split length for long contexts (see kSplitKeys): 128 keys for the tensor-core kernel, kSplitKeys otherwise.
__host__ __device__ constexpr int split_keys(int head_dim) {
  return head_dim == 64 || head_dim == 128 ? 128 : kSplitKeys;
}

// The most splits a context uses: 32 for head dim 128, kMaxSplits otherwise (see kSplitKeys).
__host__ __device__ constexpr int live_splits(int head_dim) { return head_dim == 128 ? 32 : kMaxSplits; }
constexpr int kTile = 128;  // keys per softmax tile of the plain kernel

// Query heads per block: the largest of 8, 4, 2, 1 dividing the GQA ratio (head dims of the plain kernel: 1).
int group_size(int heads, int kv_heads, int head_dim) {
  const int ratio = heads / kv_heads;
  if (head_dim != 64 && head_dim != 128) return 1;
  for (int g : {8, 4, 2}) {
    if (ratio % g == 0) return g;
  }
  return 1;
}

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

// The keys one block attends over: token t's sequence, its visible context and this split's share of it.
struct SplitRange {
  int cached_end;  // keys before it were written by earlier steps; this step's tokens write the rest
  int live;        // splits with keys for this context (the others leave at once)
  int key_begin, key_end;
  const int32_t* blocks;  // the sequence's page table
};

// The split rule (kSplitKeys) for kv's head dimension. Contains a barrier; call it from every thread of the block.
__device__ __forceinline__ SplitRange split_range(const PagedKv& kv, int t, int splits, int split) {
  __shared__ int seq_shared;
  if (threadIdx.x == 0) {  // the sequence of this token: the last s with query_start[s] <= t
    int lo = 0, hi = kv.num_seqs - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (kv.query_start[mid] <= t)
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
  SplitRange r;
  r.cached_end = kv.seq_lens[s] - (kv.query_start[s + 1] - kv.query_start[s]);
  const int ctx = r.cached_end + (t - kv.query_start[s]) + 1;  // the cached keys and this step's up to t
  // Splits are fixed per launch (a graph replays them for every context length); a context uses as many as the rule
  // at kSplitKeys gives it, and a single live split writes the output itself.
  const int long_keys = split_keys(kv.head_dim);
  r.live = min(min(splits, live_splits(kv.head_dim)),
               max((ctx + long_keys - 1) / long_keys, min(kShortSplits, (ctx + kSplitKeys - 1) / kSplitKeys)));
  const int per_split = (ctx + r.live - 1) / r.live;
  r.key_begin = split * per_split;
  r.key_end = min(ctx, r.key_begin + per_split);
  r.blocks = kv.block_indices + kv.block_indptr[s];
  return r;
}

// One KV head's keys and values in the paged cache ([block][2][kv head][block_size][head_dim]), along the page table
// of a block's sequence.
struct HeadKv {
  const uint16_t* k;  // the head's keys in cache block 0; a key's row is k + offset(key)
  const uint16_t* v;  // the same for values
  const int32_t* blocks;
  int block_size;
  int head_dim;
  int64_t block_stride;  // elements from one cache block to the next

  __device__ __forceinline__ int64_t offset(int key) const {
    return blocks[key / block_size] * block_stride + static_cast<int64_t>(key % block_size) * head_dim;
  }
};

__device__ __forceinline__ HeadKv head_kv(const PagedKv& kv, const SplitRange& r, int kvh, int hd) {
  const int64_t head_stride = static_cast<int64_t>(kv.block_size) * hd;
  const auto* cache = static_cast<const uint16_t*>(kv.cache);
  return {cache + kvh * head_stride,        cache + (kv.num_kv_heads + kvh) * head_stride, r.blocks, kv.block_size, hd,
          2 * kv.num_kv_heads * head_stride};
}

// The first kW (1 or 4) of v's components times inv, as bf16 at dst.
template <int kW>
__device__ __forceinline__ void store_scaled(uint16_t* dst, const float4& v, float inv) {
  dst[0] = f2bf(v.x * inv);
  if constexpr (kW == 4) {
    dst[1] = f2bf(v.y * inv);
    dst[2] = f2bf(v.z * inv);
    dst[3] = f2bf(v.w * inv);
  }
}

// The end of every block, once `pool` (G * groups * hd floats of shared memory) holds `groups` partial outputs of
// each head g at pool[(g * groups + k) * hd + d], already scaled to the block's running max final_max[g] (natural-log
// units) whose softmax sum is final_sum[g] (both in shared memory): adds them up, then writes the normalised bf16
// output (one live split), or this split's partials, and the last split block to arrive merges them:
// out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s. kVec: 8 when head_dim % 8 == 0 (vector loads in the merge).
template <int G, int kVec>
__device__ __forceinline__ void finish_pooled(const float* pool, int groups, int hd, const float* final_max,
                                              const float* final_sum, int heads, int h0, int splits, int split,
                                              int live, int64_t row, uint16_t* out, float* part_out, float* part_ml,
                                              unsigned* arrivals) {
  const int tid = threadIdx.x;
  const bool direct = live == 1;
  const int64_t part_row = static_cast<int64_t>(blockIdx.x) * heads + h0;  // (token, head h0) of the partials
  for (int i = tid; i < G * hd; i += kThreads) {
    const int g = i / hd, d = i % hd;
    float v = 0.0f;
    for (int k = 0; k < groups; ++k) v += pool[(g * groups + k) * hd + d];
    if (direct) {
      out[row + i] = f2bf(final_sum[g] > 0.0f ? v / final_sum[g] : 0.0f);
    } else {
      part_out[((part_row + g) * splits + split) * hd + d] = v;
    }
  }
  if (direct) return;
  if (tid < G) {
    float* ml = part_ml + ((part_row + tid) * splits + split) * 2;
    ml[0] = final_max[tid];
    ml[1] = final_sum[tid];
  }
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
  // Each split's weight: one (max, sum) pair per lane and split (live <= kMaxSplits = 2 x 32).
  __shared__ float weight[G][kMaxSplits];
  __shared__ float total[G];
  const int warp = tid >> 5, warp_lane = tid & 31;
  for (int g = warp; g < G; g += kThreads / 32) {
    const float2* ml = reinterpret_cast<const float2*>(part_ml + (part_row + g) * splits * 2);
    const float2 a = warp_lane < live ? __ldcg(ml + warp_lane) : make_float2(-INFINITY, 0.0f);
    const float2 b = warp_lane + 32 < live ? __ldcg(ml + warp_lane + 32) : make_float2(-INFINITY, 0.0f);
    const float m = warp_max(fmaxf(a.x, b.x));
    const float wa = a.y > 0.0f ? __expf(a.x - m) : 0.0f, wb = b.y > 0.0f ? __expf(b.x - m) : 0.0f;
    weight[g][warp_lane] = wa;
    weight[g][warp_lane + 32] = wb;
    const float l = warp_sum(a.y * wa + b.y * wb);
    if (warp_lane == 0) total[g] = l;
  }
  __syncthreads();
  // The weighted sum of the partials, 4 dims per load where the head dim allows; threads that share a column sum
  // every parts-th split (more loads in flight), then add up through shared memory.
  constexpr int kW = kVec == 8 ? 4 : 1;
  const int cols = G * hd / kW;
  const int parts = max(1, kThreads / cols);
  __shared__ float4 sums[kThreads];
  for (int i = tid; i < cols * parts; i += kThreads) {
    const int col = i % cols, part = i / cols;
    const int g = col * kW / hd, d = col * kW % hd;
    const float* po = part_out + (part_row + g) * splits * hd + d;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (int sp = part; sp < live; sp += parts) {
      const float w = weight[g][sp];
      if constexpr (kW == 4) {
        const float4 p = __ldcg(reinterpret_cast<const float4*>(po + static_cast<int64_t>(sp) * hd));
        v.x += p.x * w, v.y += p.y * w, v.z += p.z * w, v.w += p.w * w;
      } else {
        v.x += __ldcg(po + static_cast<int64_t>(sp) * hd) * w;
      }
    }
    if (parts > 1) {
      sums[i] = v;
    } else {
      store_scaled<kW>(out + row + col * kW, v, 1.0f / total[g]);
    }
  }
  if (parts == 1) return;
  __syncthreads();
  for (int col = tid; col < cols; col += kThreads) {
    float4 v = sums[col];
    for (int part = 1; part < parts; ++part) {
      const float4 p = sums[part * cols + col];
      v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
    }
    store_scaled<kW>(out + row + col * kW, v, 1.0f / total[col * kW / hd]);
  }
}

// finish_pooled for kernels whose threads hold acc: kVec dims (from lane * kVec) of head g for the keys of thread
// group `group`, with the block's running max and sum in every thread; `pool` must be free when called.
template <int G, int kVec>
__device__ __forceinline__ void finish(const float (&acc)[G][kVec], const float (&running_max)[G],
                                       const float (&running_sum)[G], int group, int groups, int lane, int hd,
                                       float* pool, int heads, int h0, int splits, int split, int live, int64_t row,
                                       uint16_t* out, float* part_out, float* part_ml, unsigned* arrivals) {
  __shared__ float final_max[G], final_sum[G];
  if (threadIdx.x == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) final_max[g] = running_max[g], final_sum[g] = running_sum[g];
  }
  if (group < groups) {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int e = 0; e < kVec; ++e) pool[(g * groups + group) * hd + lane * kVec + e] = acc[g][e];
  }
  __syncthreads();
  finish_pooled<G, kVec>(pool, groups, hd, final_max, final_sum, heads, h0, splits, split, live, row, out, part_out,
                         part_ml, arrivals);
}

// Cluster barrier halves (Hopper and later; every thread of every block of the cluster, in convergent code): the
// arrival releases this thread's earlier writes, the wait acquires those of every thread that arrived before it.
__device__ __forceinline__ void cluster_arrive(bool relaxed = false) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (relaxed) {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  } else {
    asm volatile("barrier.cluster.arrive.aligned;\n" ::: "memory");
  }
#endif
}
[[maybe_unused]] __device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#endif
}

// The end of the tensor-core kernel when its `live` splits (> 1) run as one thread block cluster: instead of partials
// in global memory, an atomic arrival and a merging block (finish_pooled), each live block merges a 1 / live share
// of the G x kHeadDim outputs in its own shared memory, into which every live block has written its values of that
// share and its (max, sum) per head (distributed shared memory) before one cluster barrier. So the merge costs one
// round of remote writes and one barrier, where reading the shares after a barrier cost a round of remote reads and a
// second barrier (no block may leave while another still reads its memory): 3.65 against 4.05 µs a layer for a
// 192-key context (llama-3.2-1b shape), +1.5% batch-1 decode end to end (docs/performance.md). Writing into another
// block's shared memory needs that block running: the kernel arrives (relaxed) at a first cluster barrier when it
// starts, and this waits on it. pool holds kWarps partial outputs per head as finish_pooled takes them, scaled to
// final_max (natural-log units) with softmax sum final_sum. Blocks without keys (split >= live) pass null pointers
// and only keep the barriers. Call it from every thread of every block of the cluster. Compiled for Hopper and later
// (clusters are never launched before).
template <int G, int kHeadDim>
__device__ __forceinline__ void cluster_finish(const float* pool, const float* final_max, const float* final_sum,
                                               int live, int split, int64_t row, uint16_t* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  constexpr int kElems = G * kHeadDim;
  __shared__ float inbox[kElems + kMaxClusterSplits];  // split s's values of this block's share, at s * share + k
  __shared__ float2 ml_in[kMaxClusterSplits][G];       // split s's (max, sum) per head
  const int tid = threadIdx.x;
  const bool has_keys = split < live;
  const int share = (kElems + live - 1) / live;
  cg::cluster_group cluster = cg::this_cluster();
  cluster_wait();  // every block of the cluster has started: its shared memory may be written
  if (has_keys) {
    for (int i = tid; i < kElems; i += kThreads) {
      const int g = i / kHeadDim, d = i % kHeadDim, owner = i / share;
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += pool[(g * kWarps + w) * kHeadDim + d];
      *cluster.map_shared_rank(&inbox[split * share + i - owner * share], owner) = v;
    }
    if (tid < G * live) {
      const int g = tid % G, owner = tid / G;
      *cluster.map_shared_rank(&ml_in[split][g], owner) = make_float2(final_max[g], final_sum[g]);
    }
  }
  cluster_arrive();
  cluster_wait();  // every live split's values are in
  if (!has_keys) return;
  const int begin = split * share, end = min(kElems, begin + share);
  for (int i = begin + tid; i < end; i += kThreads) {
    const int g = i / kHeadDim;
    float m = -INFINITY;
    for (int s = 0; s < live; ++s) m = fmaxf(m, ml_in[s][g].x);
    // out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s, the splits in order
    float v = 0.0f, l = 0.0f;
    for (int s = 0; s < live; ++s) {
      const float2 p = ml_in[s][g];
      const float w = p.y > 0.0f ? __expf(p.x - m) : 0.0f;
      l += p.y * w;
      v += w * inbox[s * share + i - begin];
    }
    out[row + i] = f2bf(l > 0.0f ? v / l : 0.0f);
  }
#endif
}

// cp.async.wait_group with a run-time count (0..3 groups left in flight).
__device__ __forceinline__ void cp_async_wait_upto(int n) {
  if (n >= 3) {
    cp_async_wait<3>();
  } else if (n == 2) {
    cp_async_wait<2>();
  } else if (n == 1) {
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
}

// The tensor-core kernel (head dims 64 and 128). Tiles of kMmaKeys keys, dealt to the warps in turn (warp w takes
// tiles w, w + 4, ...), `stages` of them in flight per warp; per tile a warp computes S = Q K^T and O += P V with
// mma.sync m16n8k16 (bf16 in, f32 accumulate), the G query heads as rows 0..G-1 of the 16-row A operand (the other rows
// are zero and never read). Operands come from shared memory with 16-byte loads in fragment order, not ldmatrix:
// - Q K^T sums over head dims, in any order that Q and K agree on: lane 4g + t holds, for its key g (and g + 8), the
//   16-byte chunks 4p + t of the key row (p < hd / 32), whose words are the b0, b1 of k-steps 2p and 2p + 1, and
//   takes the same chunks of its query row g as a0, a2. Key rows are stored with chunk c at c ^ 4 (row & 1), so a
//   quarter-warp's eight 16-byte loads fall on eight bank groups.
// - P V sums over the tile's keys: P comes straight from the S accumulators (rounded to bf16, as FlashAttention
//   does); lane 4g + t reads keys 2t, 2t + 1, 2t + 8, 2t + 9 of the 16-byte value chunks g + 8i, and byte permutes
//   pair the keys of one dim into b0, b1. Output tile j = 8i + e thus holds dim (n + 8i) * 8 + e in its column n.
//   Value rows are stored with chunk c at c ^ 2 ((row / 2) & 3), conflict-free for those reads.
// The exponentials are base 2 (S scaled by scale * log2 e); maxima leave the kernel in natural-log units.
constexpr int kMmaKeys = 16;
template <int kHeadDim>
constexpr int kMmaSlotBytes = 4 * (kMmaKeys * kHeadDim);  // a tile's keys and values, bf16
constexpr int kMmaMaxStages = 3;
template <int kHeadDim, int G>
constexpr size_t mma_smem(int stages) {
  const size_t pool = static_cast<size_t>(G) * kWarps * kHeadDim * sizeof(float);
  const size_t rings = static_cast<size_t>(stages) * kWarps * kMmaSlotBytes<kHeadDim>;
  return rings > pool ? rings : pool;
}

// The least blocks per SM the compiler must leave room for (0: its own register choice). The plain head-dim-128
// kernel with G = 8 is held to three (168 registers): left alone it takes 186, two blocks per SM, and large batches of
// short contexts ran 15% slower (Llama-3.1-70B's shape, 1,024 x 192: 378.6 against 321.1 µs a layer with the bound).
template <int kHeadDim, int G, bool kClustered>
constexpr int kMmaMinBlocks = kHeadDim == 128 && G == 8 && !kClustered ? 3 : 0;

template <int kHeadDim, int G, bool kClustered>
__global__ void __launch_bounds__(kThreads, (kMmaMinBlocks<kHeadDim, G, kClustered>))
    mma_attention_kernel(const uint16_t* q, int heads, PagedKv kv, const int32_t* tokens, float scale_log2, int splits,
                         int stages, uint16_t* out, float* part_out, float* part_ml, unsigned* arrivals) {
  constexpr int hd = kHeadDim;
  constexpr int kVecs = hd / 8;                      // 16-byte chunks per row
  constexpr int kSlotElems = kMmaSlotBytes<hd> / 2;  // bf16 elements per ring slot
  constexpr int kDimTiles = hd / 8;                  // n8 tiles of the output
  static_assert(G <= 8 && (hd == 64 || hd == 128));
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  __shared__ float warp_ml[kWarps][G][2];
  __shared__ float final_max[G], final_sum[G];
  const int t = tokens[blockIdx.x], h0 = blockIdx.y * G, split = blockIdx.z, tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const SplitRange r = split_range(kv, t, splits, split);
  // Launched in clusters of the splits (kClustered), the live splits merge through each other's shared memory, and
  // every block of the cluster (the same r.live in all of them) takes part in its barriers, also the blocks without
  // keys. The kernel without clusters carries no cluster code (its register allocation is then its own).
  const bool cluster_merge = kClustered && r.live > 1;
  if (cluster_merge) cluster_arrive(true);  // cluster_finish waits on it
  if (split >= r.live) {
    if (cluster_merge) {
      pdl_begin();  // lets the next kernel launch early, as the other blocks do
      cluster_finish<G, hd>(nullptr, nullptr, nullptr, r.live, split, 0, nullptr);
    }
    return;
  }
  const int kvh = h0 / (heads / kv.num_kv_heads);
  const HeadKv cache = head_kv(kv, r, kvh, hd);
  const auto k_pos = [](int row, int c) { return row * kVecs + (c ^ ((row & 1) << 2)); };
  const auto v_pos = [](int row, int c) { return row * kVecs + (c ^ (((row >> 1) & 3) << 1)); };
  uint16_t* const ring = reinterpret_cast<uint16_t*>(dynamic_smem) + warp * stages * kSlotElems;
  const int tiles = (r.key_end - r.key_begin + kMmaKeys - 1) / kMmaKeys;
  const int my_tiles = tiles > warp ? (tiles - warp + kWarps - 1) / kWarps : 0;
  const auto tile_begin = [&](int i) { return r.key_begin + (warp + i * kWarps) * kMmaKeys; };
  // Copies keys [from, to) of this warp's i-th tile (clipped to the tile) into its slot, one commit group per call;
  // the call that reaches the split's end also zeroes the slot's rows past it (no stale or uninitialised bits
  // reach the P V product, where 0 * NaN would poison the sum).
  const auto copy = [&](int i, int from, int to) {
    const int begin = tile_begin(i);
    const int lo = max(from, begin), hi = min(min(to, begin + kMmaKeys), r.key_end);
    uint16_t* const sk = ring + (i % stages) * kSlotElems;
    uint16_t* const sv = sk + kMmaKeys * hd;
    for (int e = (lo - begin) * kVecs + lane; e < (hi - begin) * kVecs; e += 32) {
      const int row = e / kVecs, c = e % kVecs;
      const int64_t at = cache.offset(begin + row) + c * 8;
      cp_async16(sk + k_pos(row, c) * 8, cache.k + at);
      cp_async16(sv + v_pos(row, c) * 8, cache.v + at);
    }
    if (to == r.key_end && begin < r.key_end) {
      for (int e = (r.key_end - begin) * kVecs + lane; e < kMmaKeys * kVecs; e += 32) {
        const int row = e / kVecs, c = e % kVecs;
        *reinterpret_cast<uint4*>(sk + k_pos(row, c) * 8) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(sv + v_pos(row, c) * 8) = make_uint4(0, 0, 0, 0);
      }
    }
    cp_async_commit();
  };
  const int first = min(stages, my_tiles);
  for (int i = 0; i < stages; ++i) copy(i, 0, i < first ? r.cached_end : 0);  // cached keys only
  pdl_begin();
  for (int i = 0; i < stages; ++i) copy(i, i < first ? r.cached_end : 0, i < first ? r.key_end : 0);

  // Q fragments of rows g < G: a0 and a2 of each k-step (a1 and a3, rows 8..15, are zero).
  const int64_t row = static_cast<int64_t>(t) * heads * hd + static_cast<int64_t>(h0) * hd;  // head h0's q/out
  uint32_t qf[hd / 16][2];
#pragma unroll
  for (int p = 0; p < hd / 32; ++p) {
    const uint4 v =
        g < G ? *reinterpret_cast<const uint4*>(q + row + g * hd + (4 * p + t4) * 8) : make_uint4(0, 0, 0, 0);
    qf[2 * p][0] = v.x, qf[2 * p][1] = v.y, qf[2 * p + 1][0] = v.z, qf[2 * p + 1][1] = v.w;
  }
  float o[kDimTiles][4];
#pragma unroll
  for (int j = 0; j < kDimTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float running_max = -INFINITY, running_sum = 0.0f;  // row g; the sum over this lane's columns only

  for (int i = 0; i < my_tiles; ++i) {
    // Tile i has landed when at most stages - 1 later groups are in flight (the first tiles' copies before and after
    // the PDL wait are two groups each; the count works out the same).
    cp_async_wait_upto(stages - 1);
    __syncwarp();
    const uint16_t* const sk = ring + (i % stages) * kSlotElems;
    const uint16_t* const sv = sk + kMmaKeys * hd;
    const int n = min(kMmaKeys, r.key_end - tile_begin(i));  // keys of this tile (>= 1)

    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int p = 0; p < hd / 32; ++p) {
        const uint4 kw = *reinterpret_cast<const uint4*>(sk + k_pos(nt * 8 + g, 4 * p + t4) * 8);
        const uint32_t a_lo[4] = {qf[2 * p][0], 0u, qf[2 * p][1], 0u};
        const uint32_t a_hi[4] = {qf[2 * p + 1][0], 0u, qf[2 * p + 1][1], 0u};
        mma_bf16(s[nt], a_lo, kw.x, kw.y);
        mma_bf16(s[nt], a_hi, kw.z, kw.w);
      }
    }
    // Online softmax of row g over keys nt * 8 + 2 t4 + e (the quad of lanes 4g .. 4g + 3 holds the row).
    float tile_max = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = nt * 8 + 2 * t4 + e < n ? s[nt][e] * scale_log2 : -INFINITY;
        s[nt][e] = v;
        tile_max = fmaxf(tile_max, v);
      }
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float new_max = fmaxf(running_max, tile_max);  // finite: key 0 of the tile is always valid
    const float alpha = exp2f(running_max - new_max);    // 0 on the warp's first tile
    running_max = new_max;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[nt][e] = exp2f(s[nt][e] - new_max);
        sum += s[nt][e];
      }
    }
    running_sum = running_sum * alpha + sum;
    const uint32_t pa[4] = {pack_bf16(s[0][0], s[0][1]), 0u, pack_bf16(s[1][0], s[1][1]), 0u};
#pragma unroll
    for (int ci = 0; ci < hd / 64; ++ci) {
      const int c = g + 8 * ci;
      const uint4 v0 = *reinterpret_cast<const uint4*>(sv + v_pos(2 * t4, c) * 8);
      const uint4 v1 = *reinterpret_cast<const uint4*>(sv + v_pos(2 * t4 + 1, c) * 8);
      const uint4 v2 = *reinterpret_cast<const uint4*>(sv + v_pos(2 * t4 + 8, c) * 8);
      const uint4 v3 = *reinterpret_cast<const uint4*>(sv + v_pos(2 * t4 + 9, c) * 8);
      const uint32_t w0[4] = {v0.x, v0.y, v0.z, v0.w}, w1[4] = {v1.x, v1.y, v1.z, v1.w};
      const uint32_t w2[4] = {v2.x, v2.y, v2.z, v2.w}, w3[4] = {v3.x, v3.y, v3.z, v3.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const unsigned sel = (e & 1) ? 0x7632u : 0x5410u;  // the high or low halves of both words
        const uint32_t b0 = __byte_perm(w0[e / 2], w1[e / 2], sel);
        const uint32_t b1 = __byte_perm(w2[e / 2], w3[e / 2], sel);
        float(&acc)[4] = o[8 * ci + e];
        acc[0] *= alpha, acc[1] *= alpha;
        mma_bf16(acc, pa, b0, b1);
      }
    }
    __syncwarp();  // the slot is free: refill it with the tile `stages` ahead
    copy(i + stages, 0, i + stages < my_tiles ? r.key_end : 0);
  }
  cp_async_wait<0>();  // only empty groups remain; the pool reuses the rings
  running_sum += __shfl_xor_sync(0xffffffffu, running_sum, 1);
  running_sum += __shfl_xor_sync(0xffffffffu, running_sum, 2);
  if (t4 == 0 && g < G) warp_ml[warp][g][0] = running_max, warp_ml[warp][g][1] = running_sum;
  __syncthreads();  // every warp is done with its ring and has posted its state
  // The warps' outputs, rescaled to the block's max, into the pool: column n of output tile 8i + e is dim
  // (n + 8i) * 8 + e; this lane holds columns 2 t4 and 2 t4 + 1 of row g.
  float* const pool = reinterpret_cast<float*>(dynamic_smem);
  if (g < G) {
    float block_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) block_max = fmaxf(block_max, warp_ml[w][g][0]);
    const float wt = exp2f(running_max - block_max);  // 0 for a warp without keys
    float* const dst = pool + (g * kWarps + warp) * hd;
#pragma unroll
    for (int j = 0; j < kDimTiles; ++j) {
      const int ci = j / 8, e = j % 8;
      dst[(2 * t4 + 8 * ci) * 8 + e] = o[j][0] * wt;
      dst[(2 * t4 + 1 + 8 * ci) * 8 + e] = o[j][1] * wt;
    }
  }
  if (tid < G) {
    float m = -INFINITY, l = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, warp_ml[w][tid][0]);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) l += warp_ml[w][tid][1] * exp2f(warp_ml[w][tid][0] - m);
    final_max[tid] = m * 0.6931471805599453f;  // natural-log units, as the merge expects
    final_sum[tid] = l;
  }
  __syncthreads();
  if (cluster_merge) {
    cluster_finish<G, hd>(pool, final_max, final_sum, r.live, split, row, out);
  } else {
    finish_pooled<G, 8>(pool, kWarps, hd, final_max, final_sum, heads, h0, splits, split, r.live, row, out, part_out,
                        part_ml, arrivals);
  }
}

// The plain kernel for other head dimensions: one query head per block, each thread scores whole keys read from the
// cache (16-byte vectors when kVec == 8, i.e. head_dim % 8 == 0), tiles of kTile keys.
template <int kVec>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const uint16_t* q, int heads, PagedKv kv, const int32_t* tokens, float scale, int splits,
                     uint16_t* out, float* part_out, float* part_ml, unsigned* arrivals) {
  const int hd = kv.head_dim;
  __shared__ float qs[1][kMaxHeadDim];
  __shared__ float scores[1][kTile];
  __shared__ float scratch[kThreads / 32][1];
  __shared__ float pool[kThreads * kVec];
  const int t = tokens[blockIdx.x], h0 = blockIdx.y, split = blockIdx.z, tid = threadIdx.x;
  const SplitRange r = split_range(kv, t, splits, split);
  if (split >= r.live) return;
  const int kvh = h0 / (heads / kv.num_kv_heads);
  const HeadKv cache = head_kv(kv, r, kvh, hd);
  pdl_begin();
  const int64_t row = static_cast<int64_t>(t) * heads * hd + static_cast<int64_t>(h0) * hd;
  for (int i = tid; i < hd; i += kThreads) qs[0][i] = bf2f(q[row + i]) * scale;
  __syncthreads();

  const int lanes = hd / kVec;          // threads covering one key's V row
  const int groups = kThreads / lanes;  // keys accumulated at once
  const int group = tid / lanes, lane = tid % lanes;
  float acc[1][kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) acc[0][e] = 0.0f;
  float running_max[1] = {-INFINITY}, running_sum[1] = {0.0f};
  for (int start = r.key_begin; start < r.key_end; start += kTile) {
    const int n = min(kTile, r.key_end - start);
    float tile_max[1] = {-INFINITY};
    for (int j = tid; j < n; j += kThreads) {
      const uint16_t* kp = cache.k + cache.offset(start + j);
      float dot = 0.0f;
      if constexpr (kVec == 8) {
        for (int d = 0; d < hd; d += 8) {
          float k8[8];
          unpack8(*reinterpret_cast<const uint4*>(kp + d), k8);
#pragma unroll
          for (int e = 0; e < 8; ++e) dot += qs[0][d + e] * k8[e];
        }
      } else {
        for (int d = 0; d < hd; ++d) dot += qs[0][d] * bf2f(kp[d]);
      }
      scores[0][j] = dot;
      tile_max[0] = fmaxf(tile_max[0], dot);
    }
    block_reduce<1, true>(tile_max, scratch);
    const float new_max = fmaxf(running_max[0], tile_max[0]);
    const float alpha = __expf(running_max[0] - new_max);  // 0 on the first tile
    running_max[0] = new_max;
    float tile_sum[1] = {0.0f};
    for (int j = tid; j < n; j += kThreads) {
      const float p = __expf(scores[0][j] - new_max);
      scores[0][j] = p;
      tile_sum[0] += p;
    }
    block_reduce<1, false>(tile_sum, scratch);  // its barriers also publish scores[]
    running_sum[0] = running_sum[0] * alpha + tile_sum[0];
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[0][e] *= alpha;
    if (group < groups) {
#pragma unroll 4
      for (int j = group; j < n; j += groups) {
        const uint16_t* vp = cache.v + cache.offset(start + j) + lane * kVec;
        if constexpr (kVec == 8) {
          float v8[8];
          unpack8(*reinterpret_cast<const uint4*>(vp), v8);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[0][e] += scores[0][j] * v8[e];
        } else {
          acc[0][0] += scores[0][j] * bf2f(vp[0]);
        }
      }
    }
    __syncthreads();  // scores[] is rewritten by the next tile
  }
  finish<1, kVec>(acc, running_max, running_sum, group, groups, lane, hd, pool, heads, h0, splits, split, r.live, row,
                  out, part_out, part_ml, arrivals);
}

// The longest split a launch of `splits` splits can give a context of up to max_seq_len keys: the context over all
// splits, or over the splits the rule at kSplitKeys gives (at most split_keys(head_dim) keys, and up to kShortSplits
// splits of at most max(kSplitKeys, max_seq_len / kShortSplits)).
int longest_split(int splits, int max_seq_len, int head_dim) {
  const int short_splits = max(kSplitKeys, (max_seq_len + kShortSplits - 1) / kShortSplits);
  const int live = min(splits, live_splits(head_dim));
  return max((max_seq_len + live - 1) / live, min(split_keys(head_dim), short_splits));
}

// Whether a launch merges its splits in a thread block cluster (cluster_finish) rather than through the workspace:
// on Hopper and later, when its splits fit one cluster and are short. For short splits the merge is most of the
// kernel's time, and distributed shared memory saves its round trips through L2 (12 splits of 32 keys: 4.6 against
// 6.2 µs a layer); for long ones clusters lose more than they save, as co-scheduling a cluster's blocks costs the
// streaming (16 splits of 512 keys: 14.7 against 13.2 µs).
bool cluster_merges(int splits, int max_seq_len, int head_dim) {
  return has_clusters() && splits > 1 && splits <= kMaxClusterSplits &&
         longest_split(splits, max_seq_len, head_dim) <= kWarps * kMmaKeys;
}

// Blocks of `kernel` that one SM holds with `smem` bytes of dynamic shared memory.
template <typename Kernel>
int blocks_per_sm(Kernel kernel, size_t smem) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  int n = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem);
  return n;
}

// Tiles in flight per warp of the tensor-core kernel (its ring slots), as many as the longest split it expects gives
// it, up to three. For head dim 128 (8 KB tiles, 96 KB of rings for three) the third slot pays when few tokens split
// long contexts (qwen3-0.6b, one sequence of 32,768 tokens: 44 against 51 µs a layer with two); with one split per
// token the batch fills the GPU, and a third block per SM matters more (1,024 sequences of 192 tokens: 242 against
// 327 µs) — unless the grid is under two waves. Then part of the GPU idles in the second wave: a block's rate is
// bounded by the tiles it keeps in flight, and the few blocks of the last wave cannot stream the cache at full
// bandwidth, so a deeper ring per block pays more than the block per SM it costs (three against two slots, i.e. two
// against three blocks per SM on the H200; 64 tokens x 8 head groups of 4,096 keys each, 512 blocks: 351.7 against
// 279.0 µs a layer for qwen3-0.6b's shape, 361.0 against 288.2 for llama-3.1-8b's; 64 x (4,096, 128) end to end
// 2,937 against 3,165 out tok/s, docs/performance.md) — where the deeper ring still leaves two blocks per SM (the
// occupancy calculator is asked once per kernel and device). Decode graphs pass max_model_len here, so the choice
// cannot depend on the contexts a replay meets.
template <int kHeadDim, int G>
int ring_stages(dim3 grid, int splits, int max_seq_len, bool clustered) {
  const int longest = longest_split(splits, max_seq_len, kHeadDim);
  const int max_stages = kHeadDim == 64 || (splits > 1 && longest >= 512) ? kMmaMaxStages : 2;
  const int stages = max(1, min(max_stages, (longest + kMmaKeys * kWarps - 1) / (kMmaKeys * kWarps)));
  if (clustered || stages == kMmaMaxStages || longest < 512) return stages;  // here stages == 2
  const auto kernel = mma_attention_kernel<kHeadDim, G, false>;
  static const int shallow = blocks_per_sm(kernel, mma_smem<kHeadDim, G>(2));
  static const int deep = blocks_per_sm(kernel, mma_smem<kHeadDim, G>(kMmaMaxStages));
  const long blocks = static_cast<long>(grid.x) * grid.y * grid.z;
  return deep >= 2 && blocks < 2L * shallow * sm_count() ? kMmaMaxStages : stages;
}

// The tensor-core kernel for head dim kHeadDim and group G.
template <int kHeadDim, int G>
void launch_group(dim3 grid, int max_seq_len, cudaStream_t s, const uint16_t* q, int heads, const PagedKv& kv,
                  const int32_t* tokens, float scale, int splits, uint16_t* out, float* part_out, float* part_ml,
                  unsigned* arrivals) {
  constexpr float kLog2e = 1.4426950408889634f;
  const bool clustered = cluster_merges(splits, max_seq_len, kHeadDim);
  const auto kernel = clustered ? mma_attention_kernel<kHeadDim, G, true> : mma_attention_kernel<kHeadDim, G, false>;
  const int stages = ring_stages<kHeadDim, G>(grid, splits, max_seq_len, clustered);
  const size_t smem = mma_smem<kHeadDim, G>(stages);
  // Above 48 KiB of shared memory needs an opt-in, per device, as do clusters of more than 8 blocks: set them on
  // every launch (cheap host calls).
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (clustered) cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  launch_clusters(kernel, grid, kThreads, smem, s, dim3(1, 1, clustered ? splits : 1), q, heads, kv, tokens,
                  scale * kLog2e, splits, stages, out, part_out, part_ml, arrivals);
}

template <int kHeadDim>
void launch_head_dim(int group, int max_seq_len, int splits, dim3 grid, cudaStream_t s, const uint16_t* q, int heads,
                     const PagedKv& kv, const int32_t* tokens, float scale, uint16_t* out, float* part_out,
                     float* part_ml, unsigned* arrivals) {
  const auto go = [&](auto g) {
    launch_group<kHeadDim, decltype(g)::value>(grid, max_seq_len, s, q, heads, kv, tokens, scale, splits, out, part_out,
                                               part_ml, arrivals);
  };
  switch (group) {
    case 8:
      return go(std::integral_constant<int, 8>{});
    case 4:
      return go(std::integral_constant<int, 4>{});
    case 2:
      return go(std::integral_constant<int, 2>{});
    default:
      return go(std::integral_constant<int, 1>{});
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
                     float scale, int splits, int max_seq_len, float* workspace, uint16_t* out, cudaStream_t s) {
  if (num_tokens == 0) return;
  const int head_dim = kv.head_dim;
  const int group = group_size(heads, kv.num_kv_heads, head_dim);
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(heads / group),
                  static_cast<unsigned>(splits));
  auto* arrivals = reinterpret_cast<unsigned*>(workspace);
  float* part_out = workspace + kMaxPartialRows;
  float* part_ml = part_out + static_cast<size_t>(num_tokens) * heads * splits * head_dim;
  if (head_dim == 64) {
    launch_head_dim<64>(group, max_seq_len, splits, grid, s, q, heads, kv, tokens, scale, out, part_out, part_ml,
                        arrivals);
  } else if (head_dim == 128) {
    launch_head_dim<128>(group, max_seq_len, splits, grid, s, q, heads, kv, tokens, scale, out, part_out, part_ml,
                         arrivals);
  } else if (head_dim % 8 == 0) {
    launch(attention_kernel<8>, grid, kThreads, 0, s, q, heads, kv, tokens, scale, splits, out, part_out, part_ml,
           arrivals);
  } else {
    launch(attention_kernel<1>, grid, kThreads, 0, s, q, heads, kv, tokens, scale, splits, out, part_out, part_ml,
           arrivals);
  }
}

}  // namespace photon::cuda
