// Token selection on the GPU, one block per row, so only ids cross to the host: argmax, or a Gumbel-max draw among
// the tokens that top-k, top-p and min-p keep — the selection of the host sampler (cpu::sample_row), with the same
// draws (core/random.hpp). top-k and top-p keep a prefix of the tokens in their order (cuda/token_order.cuh): top-p
// alone gathers the few tokens around its cut into shared memory and sorts them there; otherwise the kernel finds
// the prefix's last token by searching the order, without sorting. When the rows are few, each is shared by the blocks
// of a thread block cluster (every selection, by the search), so that one row's passes do not run on one SM while the
// others idle.
#include <cooperative_groups.h>

#include "core/random.hpp"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"
#include "cuda/token_order.cuh"

namespace photon::cuda {
namespace {

// One block per row; each listed token is distinct, so the threads never touch the same logit. The _rn intrinsics
// keep every product and sum rounded on its own (no fused multiply-add), as the host computes them. The logits of
// rows whose logprobs are wanted are kept in `saved` first (one float per entry), for restore_kernel.
__global__ void __launch_bounds__(kThreads)
    adjust_kernel(float* logits, int vocab, const SampleRequest* args, const LogitAdjustment* entries, float* saved) {
  const SampleRequest a = args[blockIdx.x];
  if (a.adjustment_count == 0) return;
  float* row = logits + static_cast<int64_t>(a.row) * vocab;
  const bool additive = a.presence_penalty != 0.0f || a.frequency_penalty != 0.0f;
  for (int i = threadIdx.x; i < a.adjustment_count; i += kThreads) {
    const LogitAdjustment e = entries[a.adjustment_begin + i];
    float l = row[e.token];
    if (a.logprobs >= 0) saved[a.adjustment_begin + i] = l;
    if (e.bias != 0.0f) l = __fadd_rn(l, e.bias);
    if (e.in_context != 0 && a.repetition_penalty != 1.0f) {
      l = l > 0.0f ? __fdiv_rn(l, a.repetition_penalty) : __fmul_rn(l, a.repetition_penalty);
    }
    if (additive && e.output_count > 0) {
      const float frequency = __fmul_rn(a.frequency_penalty, static_cast<float>(e.output_count));
      l = __fsub_rn(l, __fadd_rn(a.presence_penalty, frequency));
    }
    row[e.token] = l;
  }
}

// Writes back what adjust_kernel kept: the rows whose logprobs are wanted become the model's again.
__global__ void __launch_bounds__(kThreads) restore_kernel(float* logits, int vocab, const SampleRequest* args,
                                                           const LogitAdjustment* entries, const float* saved) {
  const SampleRequest a = args[blockIdx.x];
  if (a.adjustment_count == 0 || a.logprobs < 0) return;
  float* row = logits + static_cast<int64_t>(a.row) * vocab;
  for (int i = threadIdx.x; i < a.adjustment_count; i += kThreads) {
    row[entries[a.adjustment_begin + i].token] = saved[a.adjustment_begin + i];
  }
}

// Top-p's bracket: thresholds on a token's probability relative to the best one's, falling; the last (0) takes every
// token, so its mass is the total. One pass scores them all; the cut lies between two of them.
__device__ __forceinline__ float bracket(int j) {
  constexpr float kBrackets[kPoints] = {0x1p-1f, 0x1p-2f, 0x1p-4f, 0x1p-7f, 0x1p-11f, 0x1p-16f, 0x1p-24f, 0.0f};
  return kBrackets[j];
}

// Tokens top-p may gather into shared memory (32 KB): more, and the kernel searches the order instead.
constexpr int kGatherCapacity = 4096;

// A token's place in the order as one 64-bit value, larger first: its order key, then its id ascending.
__device__ __forceinline__ uint64_t packed(uint32_t key, int32_t id) {
  return (static_cast<uint64_t>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}

// A request's Gumbel-max draw: token id's value is its logit scaled, (logit - max) / T, plus its Gumbel variate.
struct GumbelDraw {
  double max_logit;
  double inv_t;
  double log_min_p;  // -inf without min-p
  uint64_t seed;
  uint64_t index;

  __device__ GumbelDraw(const SampleRequest& a, float max, double inv_temperature)
      : max_logit(max),
        inv_t(inv_temperature),
        log_min_p(a.min_p > 0.0f ? log(static_cast<double>(a.min_p)) : -INFINITY),
        seed(a.seed),
        index(a.index) {}

  // Token id's value into v, or false (v untouched) where the token cannot win: below min-p's floor, or more than
  // kGumbelMax under `best` (the largest variate could not lift it past).
  __device__ bool value(float logit, int id, float best, float& v) const {
    const double scaled = (static_cast<double>(logit) - max_logit) * inv_t;
    if (scaled < log_min_p || static_cast<float>(scaled) + kGumbelMax < best) return false;
    v = static_cast<float>(scaled) + gumbel(seed, index, static_cast<uint32_t>(id));
    return true;
  }
};

// Top-p (with no top-k) in three passes over the row: the maximum (the caller's), the masses at or above each
// bracket, then the tokens at or above the bracket that reaches top_p's share of the total, gathered into shared
// memory, sorted there and walked for the cut; min-p and the draw run over them, not over the row. Writes this
// thread's best (value, id) of the draw and returns true, or returns false — every thread alike — when more tokens
// than kGatherCapacity would be gathered. Contains barriers: every thread calls it.
__device__ bool sample_top_p_gathered(const Row& r, const SampleRequest& a, double inv_t, float& best, int& best_id,
                                      double (*sums)[kPoints]) {
  __shared__ uint64_t gathered[kGatherCapacity];
  __shared__ int count;
  __shared__ int keep;
  float mass[kPoints] = {}, number[kPoints] = {};
  for (int i = threadIdx.x; i < r.vocab; i += kThreads) {
    const float w = weight(r, r.logits[i]);
#pragma unroll
    for (int j = 0; j < kPoints; ++j) {
      if (w >= bracket(j)) {
        mass[j] += w;
        number[j] += 1.0f;
      }
    }
  }
  double sum[kPoints];
  block_sums(mass, sum, sums);
  const double target = static_cast<double>(a.top_p) * sum[kPoints - 1];
  int j = 0;
  while (j < kPoints - 1 && sum[j] < target) ++j;
  block_sums(number, sum, sums);
  if (sum[j] > kGatherCapacity) return false;
  const float least = bracket(j);  // the tokens at or above it are a prefix of the order holding the cut
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < r.vocab; i += kThreads) {
    const float logit = r.logits[i];
    if (weight(r, logit) < least) continue;
    const int slot = atomicAdd(&count, 1);
    if (slot < kGatherCapacity) gathered[slot] = packed(order_key(logit), i);
  }
  __syncthreads();
  const int n = count < kGatherCapacity ? count : kGatherCapacity;
  int size = 1;
  while (size < n) size <<= 1;
  for (int i = n + threadIdx.x; i < size; i += kThreads) gathered[i] = 0;  // sorts last
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {  // bitonic sort, largest first
    for (int half = k >> 1; half > 0; half >>= 1) {
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int other = i ^ half;
        if (other <= i) continue;
        const uint64_t x = gathered[i], y = gathered[other];
        if ((i & k) == 0 ? x < y : x > y) {
          gathered[i] = y;
          gathered[other] = x;
        }
      }
      __syncthreads();
    }
  }
  // The cut: the first prefix whose mass reaches the target, summed 32 tokens at a time by the first warp.
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    double above = 0.0;
    int kept = n;
    for (int base = 0; base < n; base += 32) {
      const int i = base + lane;
      double sum = i < n ? static_cast<double>(weight(r, key_value(static_cast<uint32_t>(gathered[i] >> 32)))) : 0.0;
      for (int o = 1; o < 32; o <<= 1) {
        const double lower = __shfl_up_sync(0xffffffffu, sum, o);
        if (lane >= o) sum += lower;
      }
      const unsigned reached = __ballot_sync(0xffffffffu, i < n && above + sum >= target);
      if (reached != 0u) {
        kept = base + __ffs(static_cast<int>(reached));
        break;
      }
      above += __shfl_sync(0xffffffffu, sum, 31);
    }
    if (lane == 0) keep = kept;
  }
  __syncthreads();
  const int kept = keep;
  const GumbelDraw draw(a, r.max_logit, inv_t);
  for (int i = threadIdx.x; i < kept; i += kThreads) {
    const float logit = key_value(static_cast<uint32_t>(gathered[i] >> 32));
    const auto id = static_cast<int>(0xffffffffu - static_cast<uint32_t>(gathered[i]));
    float v;
    if (!draw.value(logit, id, best, v)) continue;
    if (v > best || (v == best && id < best_id)) {
      best = v;
      best_id = id;
    }
  }
  return true;
}

// Whether the draw (v, id) beats (best, best_id): the larger value, ties to the lower id.
__device__ __forceinline__ bool beats(float v, int id, float best, int best_id) {
  return v > best || (v == best && id < best_id);
}

// The block's best (value, id) of the draw, ties to the lower id, in thread 0's best and best_id. Contains a
// barrier: every thread calls it.
__device__ void block_best(float& best, int& best_id) {
  __shared__ float best_values[32];
  __shared__ int best_ids[32];
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, best_id, o);
    if (ov > best || (ov == best && oi < best_id)) {
      best = ov;
      best_id = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    best_values[warp] = best;
    best_ids[warp] = best_id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      if (beats(best_values[w], best_ids[w], best, best_id)) {
        best = best_values[w];
        best_id = best_ids[w];
      }
    }
  }
}

// The block's best id of the draw into *out (0 when no token was drawn). Contains a barrier.
__device__ void write_best(float best, int best_id, int vocab, int32_t* out) {
  block_best(best, best_id);
  if (threadIdx.x == 0) *out = best_id < vocab ? best_id : 0;
}

// Top-p's rows (sample_top_p_gathered); the others, and rows with more tokens to gather than it takes, get -1, for
// sample_kernel. A kernel of its own, so that its registers do not limit sample_kernel's blocks; held to two blocks an
// SM (64 registers, a few spilled on sm_90a), which measured 2% faster than one block of 128 registers.
__global__ void __launch_bounds__(kThreads, 2)
    top_p_kernel(const float* logits, int vocab, const SampleRequest* args, int32_t* out_ids) {
  __shared__ float scratch[32];
  __shared__ double sums[kWarps][kPoints];
  const SampleRequest a = args[blockIdx.x];
  if (!top_p_alone(a, vocab)) {
    if (threadIdx.x == 0) out_ids[blockIdx.x] = -1;
    return;
  }
  const float* row = logits + static_cast<int64_t>(a.row) * vocab;
  float max_logit = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) max_logit = fmaxf(max_logit, row[i]);
  max_logit = block_max(max_logit, scratch);
  const double inv_t = 1.0 / static_cast<double>(a.temperature);
  const Row r{row, vocab, max_logit, static_cast<float>(inv_t)};
  float best = -INFINITY;
  int best_id = vocab;
  if (!sample_top_p_gathered(r, a, inv_t, best, best_id, sums)) {
    if (threadIdx.x == 0) out_ids[blockIdx.x] = -1;
    return;
  }
  write_best(best, best_id, vocab, out_ids + blockIdx.x);
}

// The draw over one row by `team` (SoloTeam, or ClusterTeam below): the maximum, top-k's and top-p's cuts found by
// searching the order (token_order.cuh), min-p, then the Gumbel-max draw (argmax when greedy) over the team's span of
// the row, into this thread's best (value, id). Every thread of the team calls it (it contains the team's barriers).
template <class Team>
__device__ void draw_row(const float* row, int vocab, const SampleRequest& a, Team& team, float& best, int& best_id) {
  const bool greedy = a.temperature <= 0.0f;  // the same for every block of the team
  float max_logit = -INFINITY;
  if (!greedy) {
    for (int i = team.begin + static_cast<int>(threadIdx.x); i < team.end; i += kThreads) {
      max_logit = fmaxf(max_logit, row[i]);
    }
    max_logit = team.max(max_logit);
  }
  const double inv_t = greedy ? 1.0 : 1.0 / static_cast<double>(a.temperature);
  Cut cut{0u, INT_MAX};  // every token
  const bool top_k = a.top_k > 0 && a.top_k < vocab;
  if (!greedy && (top_k || a.top_p < 1.0f)) {
    const Row r{row, vocab, max_logit, static_cast<float>(inv_t)};
    if (top_k) cut = find_cut<false>(r, cut, static_cast<double>(a.top_k), team);
    if (a.top_p < 1.0f) {
      float part[kPoints] = {};
      for (int i = team.begin + static_cast<int>(threadIdx.x); i < team.end; i += kThreads) {
        if (inside(order_key(row[i]), i, cut)) part[0] += weight(r, row[i]);
      }
      double total[kPoints];
      team.sums(part, total);
      cut = find_cut<true>(r, cut, static_cast<double>(a.top_p) * total[0], team);
    }
  }
  const GumbelDraw draw(a, max_logit, inv_t);
  best = -INFINITY;
  best_id = vocab;
  for (int i = team.begin + static_cast<int>(threadIdx.x); i < team.end; i += kThreads) {
    float v;
    if (greedy) {
      v = row[i];
    } else if (!inside(order_key(row[i]), i, cut) || !draw.value(row[i], i, best, v)) {
      continue;
    }
    if (v > best) {  // i increases, so ties keep the lower id
      best = v;
      best_id = i;
    }
  }
}

// One block scoring a whole row (token_order.cuh's SoloTeam), with the maximum as a block reduction.
struct SoloRowTeam : SoloTeam {
  float* scratch32;  // the block's shared memory for block_max

  __device__ float max(float v) { return block_max(v, scratch32); }
};

// Every row, or with `decided` only those top_p_kernel left at -1, one block a row.
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, int vocab, const SampleRequest* args, bool decided, int32_t* out_ids) {
  __shared__ float scratch[32];
  __shared__ double sums[kWarps][kPoints];
  if (decided && out_ids[blockIdx.x] >= 0) return;  // read by every thread before thread 0 writes it, at the end
  const SampleRequest a = args[blockIdx.x];
  SoloRowTeam team{{sums, 0, vocab}, scratch};
  float best;
  int best_id;
  draw_row(logits + static_cast<int64_t>(a.row) * vocab, vocab, a, team, best, best_id);
  write_best(best, best_id, vocab, out_ids + blockIdx.x);
}

// The most blocks a row is shared by (a portable cluster size).
constexpr int kMaxParts = 8;

// The blocks of a thread block cluster scoring one row: block `rank` of `parts` takes the rank-th of equal runs of
// the row's tokens. Each reduction (the maximum, the sums of find_cut) is the blocks' own, then an exchange through
// distributed shared memory: every block writes its result into every block's slot for it, the cluster barrier, then
// every block combines the slots in rank order, so all hold the same value bit for bit and take the same decisions.
// The sums' slots alternate between two buffers: a block writes a round's slots only after every block has passed
// the previous round's barrier, so after every block has read the round before that. Distributed shared memory is
// first written after the barrier that every block arrives at on entry (all are then running; `join`).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // clusters: the sm_90a compilation only
struct ClusterTeam {
  double (*scratch)[kPoints];           // the block's shared memory for block_sums
  float* scratch32;                     // and for block_max
  double (*slots)[kMaxParts][kPoints];  // [2]: the sums' exchange
  float* max_slots;                     // [kMaxParts]: the maximum's exchange
  int rank;
  int parts;
  int begin;  // the tokens [begin, end) this block scores
  int end;
  int round = 0;
  bool joined = false;

  // Waits until every block of the cluster has arrived at the barrier of the kernel's entry. Every thread calls it.
  __device__ void join() {
    if (!joined) asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    joined = true;
  }

  __device__ float max(float v) {
    v = block_max(v, scratch32);
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    join();
    if (static_cast<int>(threadIdx.x) < parts) *cluster.map_shared_rank(&max_slots[rank], threadIdx.x) = v;
    cluster.sync();
    for (int p = 0; p < parts; ++p) v = fmaxf(v, max_slots[p]);
    return v;
  }

  __device__ void sums(const float (&part)[kPoints], double (&out)[kPoints]) {
    block_sums(part, out, scratch);
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    join();
    double(*slot)[kPoints] = slots[round & 1];
    ++round;
    if (static_cast<int>(threadIdx.x) < parts) {
      double* to = cluster.map_shared_rank(&slot[rank][0], threadIdx.x);
#pragma unroll
      for (int j = 0; j < kPoints; ++j) to[j] = out[j];
    }
    cluster.sync();
#pragma unroll
    for (int j = 0; j < kPoints; ++j) {
      double total = 0.0;
      for (int p = 0; p < parts; ++p) total += slot[p][j];
      out[j] = total;
    }
  }
};
#endif

// Rows each shared by the blocks of a cluster (ClusterTeam): the draw of sample_kernel over each block's run of the
// row, then block 0 takes the best of the blocks' bests.
__global__ void __launch_bounds__(kThreads)
    split_sample_kernel(const float* logits, int vocab, const SampleRequest* args, int32_t* out_ids) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // clusters; never launched on older GPUs (split_parts)
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  __shared__ float scratch[32];
  __shared__ double sums[kWarps][kPoints];
  __shared__ double slots[2][kMaxParts][kPoints];
  __shared__ float max_slots[kMaxParts];
  __shared__ float part_best[kMaxParts];
  __shared__ int part_best_id[kMaxParts];
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  const int parts = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int request = static_cast<int>(blockIdx.x) / parts;
  pdl_begin();  // the logits and the requests come from the step's kernels and uploads
  const SampleRequest a = args[request];
  ClusterTeam team{sums,
                   scratch,
                   slots,
                   max_slots,
                   rank,
                   parts,
                   static_cast<int>(static_cast<int64_t>(vocab) * rank / parts),
                   static_cast<int>(static_cast<int64_t>(vocab) * (rank + 1) / parts)};
  float best;
  int best_id;
  draw_row(logits + static_cast<int64_t>(a.row) * vocab, vocab, a, team, best, best_id);
  block_best(best, best_id);
  team.join();
  if (threadIdx.x == 0) {
    *cluster.map_shared_rank(&part_best[rank], 0) = best;
    *cluster.map_shared_rank(&part_best_id[rank], 0) = best_id;
  }
  cluster.sync();
  if (rank == 0 && threadIdx.x == 0) {
    best = part_best[0];
    best_id = part_best_id[0];
    for (int p = 1; p < parts; ++p) {
      if (beats(part_best[p], part_best_id[p], best, best_id)) {
        best = part_best[p];
        best_id = part_best_id[p];
      }
    }
    out_ids[request] = best_id < vocab ? best_id : 0;
  }
#endif
}

// Blocks a row is shared by: the most (a power of two up to kMaxParts) that keep the grid within one block an SM, each
// with at least eight tokens a thread; 1 where a row's block is best alone.
int split_parts(int n, int vocab) {
  if (!has_clusters()) return 1;
  int parts = kMaxParts;
  while (parts > 1 && (static_cast<int64_t>(n) * parts > sm_count() || vocab < parts * kThreads * 8)) parts /= 2;
  return parts;
}

}  // namespace

void sample_rows(const float* logits, int vocab, const SampleRequest* args, int n, bool any_top_p_alone,
                 int32_t* out_ids, cudaStream_t s) {
  if (n == 0) return;
  // Top-p alone keeps its one-block gathering even when the rows are few: on one SM it beat the cluster's search over
  // the order for peaked rows, a real model's (2026-12-07 (night), H100: 925 against 867 tok/s at batch 1).
  const int parts = any_top_p_alone ? 1 : split_parts(n, vocab);
  if (parts > 1) {
    if (launch_clusters(split_sample_kernel, dim3(static_cast<unsigned>(n * parts)), dim3(kThreads), 0, s,
                        dim3(static_cast<unsigned>(parts)), logits, vocab, args, out_ids) == cudaSuccess) {
      return;
    }
    cudaGetLastError();  // a cluster launch the device refused: nothing ran; one block a row instead
  }
  if (any_top_p_alone) top_p_kernel<<<n, kThreads, 0, s>>>(logits, vocab, args, out_ids);
  sample_kernel<<<n, kThreads, 0, s>>>(logits, vocab, args, any_top_p_alone, out_ids);
}

void adjust_logits(float* logits, int vocab, const SampleRequest* args, int n, const LogitAdjustment* entries,
                   float* saved, cudaStream_t s) {
  if (n > 0) adjust_kernel<<<n, kThreads, 0, s>>>(logits, vocab, args, entries, saved);
}

void restore_logits(float* logits, int vocab, const SampleRequest* args, int n, const LogitAdjustment* entries,
                    const float* saved, cudaStream_t s) {
  if (n > 0) restore_kernel<<<n, kThreads, 0, s>>>(logits, vocab, args, entries, saved);
}

}  // namespace photon::cuda
