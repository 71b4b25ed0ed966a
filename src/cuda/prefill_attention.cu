// Causal attention for prompt chunks on tensor cores, FlashAttention-2 style.
//
// A block owns 128 consecutive query tokens of one sequence and one head; each of its 8 warps owns 16 query rows and
// keeps them in registers for the whole kernel: Q as mma A-fragments, the running output O and the softmax state
// as accumulators. The block walks the keys its queries can see in tiles of 64, gathering K and V from the paged
// cache into a three-slot shared-memory ring with asynchronous copies, two tiles ahead of the math, one barrier a
// tile. Per tile a warp computes S = Q K^T with mma.sync m16n8k16 (bf16 in, f32 accumulate), masks the causal
// diagonal, updates the online softmax in registers, and feeds P (rounded to bf16, straight from the S accumulators)
// into O += P V. Only tiles at or below the diagonal are visited (a warp skips the tiles wholly past its rows), and
// the longest query tiles are scheduled first.
#include "cuda/common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"
#include "cuda/mma.cuh"

namespace photon::cuda {
namespace {

constexpr int kWarps = 8;           // 16 query rows each
constexpr int kRows = 16 * kWarps;  // query rows a block
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockK = 64;  // keys per tile
constexpr int kStages = 3;   // K/V tiles in the shared-memory ring

template <int HD>
constexpr int kStride = HD + 8;  // shared-memory row pitch in elements: 16 bytes of padding spread ldmatrix banks

// 2^x on the special-function unit, subnormal results flushed to zero (probabilities below 2^-126 of a row's
// largest: far below bf16's resolution of P). exp2f adds a subnormal-range fix-up around the same instruction.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <int HD>
constexpr size_t smem_bytes() {
  return static_cast<size_t>(kStages) * 2 * kBlockK * kStride<HD> * sizeof(uint16_t);  // the ring of (K, V) tiles
}

// The Q tile is staged in the ring's last slot before the first K/V tile arrives there, so Q needs no shared memory
// of its own. Head dim 64 asks for two blocks an SM (128 registers a thread), 128 for one.
template <int HD>
__global__ void __launch_bounds__(kThreads, HD == 64 ? 2 : 1)
    prefill_kernel(const uint16_t* q, int heads, PagedKv kv, const int32_t* seqs, int tiles_per_seq, float scale_log2,
                   uint16_t* out) {
  static_assert(kRows <= 2 * kBlockK, "the Q tile must fit one ring slot");
  const uint16_t* cache = static_cast<const uint16_t*>(kv.cache);
  const int32_t *query_start = kv.query_start, *seq_lens = kv.seq_lens;
  const int32_t *block_indptr = kv.block_indptr, *block_indices = kv.block_indices;
  const int kv_heads = kv.num_kv_heads, block_size = kv.block_size;
  pdl_begin();
  constexpr int S = kStride<HD>;
  constexpr int kVecs = HD / 8;  // 16-byte vectors per row
  constexpr int kSlot = 2 * kBlockK * S;
  extern __shared__ __align__(16) uint16_t smem[];  // [kStages][K, V][kBlockK][S]

  const int seq = seqs[blockIdx.x / tiles_per_seq];
  const int tile = tiles_per_seq - 1 - static_cast<int>(blockIdx.x % tiles_per_seq);  // longest tiles first
  const int h = blockIdx.y;
  const int q_len = query_start[seq + 1] - query_start[seq];
  const int q_begin = tile * kRows;
  if (q_begin >= q_len) return;
  const int rows = min(kRows, q_len - q_begin);
  const int first_pos = seq_lens[seq] - q_len + q_begin;  // position of query row 0
  const int num_keys = first_pos + rows;                  // keys 0 .. last row's position
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int kvh = h / (heads / kv_heads);
  const int32_t* pages = block_indices + block_indptr[seq];
  const PageSplit split(block_size);
  const int64_t head_stride = static_cast<int64_t>(block_size) * HD;
  const int64_t page_stride = 2 * kv_heads * head_stride;
  const int64_t token0 = query_start[seq] + q_begin;

  const auto load_kv = [&](int stage, int k0) {
    uint16_t* dk = smem + stage * kSlot;
    uint16_t* dv = dk + kBlockK * S;
    for (int i = tid; i < kBlockK * kVecs; i += kThreads) {
      const int r = i / kVecs, c = i % kVecs, key = k0 + r;
      const bool valid = key < num_keys;
      const int kk = valid ? key : 0;
      const uint16_t* src = cache + pages[split.page(kk)] * page_stride + kvh * head_stride +
                            static_cast<int64_t>(split.offset(kk)) * HD + c * 8;
      cp_async16(dk + r * S + c * 8, src, valid);
      cp_async16(dv + r * S + c * 8, src + kv_heads * head_stride, valid);
    }
  };
  const int key_tiles = (num_keys + kBlockK - 1) / kBlockK;
  // Q (rows past the chunk read as zeros) into the last slot, with tile 0; tile 1 in its own group.
  uint16_t* sq = smem + (kStages - 1) * kSlot;
  for (int i = tid; i < kRows * kVecs; i += kThreads) {
    const int r = i / kVecs, c = i % kVecs;
    const bool valid = r < rows;
    cp_async16(sq + r * S + c * 8, q + ((token0 + (valid ? r : 0)) * heads + h) * HD + c * 8, valid);
  }
  load_kv(0, 0);
  cp_async_commit();
  if (key_tiles > 1) load_kv(1, kBlockK);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();

  const int r0 = warp * 16;
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) ldmatrix_x4(qf[kk], sq + (r0 + (lane & 15)) * S + kk * 16 + (lane >> 4) * 8);

  float o[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  // Running maxima in raw score units (the scale is applied inside the exponent); sums of this thread's columns.
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const int pos[2] = {first_pos + r0 + g, first_pos + r0 + g + 8};
  const int warp_last = r0 < rows ? first_pos + min(r0 + 15, rows - 1) : -1;  // -1: no rows of this chunk

  for (int j = 0; j < key_tiles; ++j) {
    const int k0 = j * kBlockK;
    // One barrier a tile: after it tile j is visible to every warp and every warp is done with tile j - 1, whose
    // slot (and, for j = 0, the Q tile's) is refilled with tile j + 2.
    cp_async_wait<1>();
    __syncthreads();
    if (j + 2 < key_tiles) load_kv((j + 2) % kStages, k0 + 2 * kBlockK);
    cp_async_commit();
    if (k0 > warp_last) continue;  // every key of this tile is past every row of this warp
    const uint16_t* tk = smem + (j % kStages) * kSlot;
    const uint16_t* tv = tk + kBlockK * S;

    // S = Q K^T: 16 rows x 64 keys per warp, as 8 accumulator tiles of 16 x 8.
    float s[kBlockK / 8][4];
#pragma unroll
    for (int n = 0; n < kBlockK / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < kBlockK / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, tk + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * S + kk * 16 + ((lane >> 3) & 1) * 8);
        mma_bf16(s[2 * np], qf[kk], b[0], b[1]);
        mma_bf16(s[2 * np + 1], qf[kk], b[2], b[3]);
      }
    }

    // Causal mask (only tiles reaching past a row's position need it) and the online softmax, in log2 units.
    const bool needs_mask = k0 + kBlockK - 1 > first_pos + r0;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kBlockK / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = s[n][2 * rr + e];
          if (needs_mask && k0 + n * 8 + 2 * t4 + e > pos[rr]) v = -INFINITY;
          mx = fmaxf(mx, v);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float new_max = fmaxf(row_max[rr], mx);
      const bool none = new_max == -INFINITY;  // nothing visible to this row yet
      const float alpha = none ? 1.0f : exp2_ftz((row_max[rr] - new_max) * scale_log2);
      const float offset = none ? 0.0f : new_max * scale_log2;
      row_max[rr] = new_max;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kBlockK / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = s[n][2 * rr + e];
          v = exp2_ftz(fmaf(v, scale_log2, -offset));  // masked scores: exp2(-inf) = 0
          sum += v;
        }
      }
      row_sum[rr] = row_sum[rr] * alpha + sum;  // this thread's columns; the quad is summed at the end
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        o[n][2 * rr] *= alpha;
        o[n][2 * rr + 1] *= alpha;
      }
    }

    // O += P V: P's accumulator layout is the A-fragment layout of the next product.
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      const uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                             pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int np = 0; np < HD / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, tv + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + np * 16 + (lane >> 4) * 8);
        mma_bf16(o[2 * np], a, b[0], b[1]);
        mma_bf16(o[2 * np + 1], a, b[2], b[3]);
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float sum = row_sum[rr];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int r = r0 + g + 8 * rr;
    if (r >= rows) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    uint16_t* dst = out + ((token0 + r) * heads + h) * HD + 2 * t4;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8) = pack_bf16(o[n][2 * rr] * inv, o[n][2 * rr + 1] * inv);
    }
  }
}

template <int HD>
void launch_head_dim(const uint16_t* q, int heads, const PagedKv& kv, const int32_t* seqs, int num_seqs,
                     int max_query_len, float scale, uint16_t* out, cudaStream_t s) {
  // Above 48 KiB of shared memory needs an opt-in, per device: set it on every launch (a cheap host call).
  cudaFuncSetAttribute(prefill_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(smem_bytes<HD>()));
  const int tiles = (max_query_len + kRows - 1) / kRows;
  const dim3 grid(static_cast<unsigned>(num_seqs * tiles), static_cast<unsigned>(heads));
  constexpr float kLog2e = 1.4426950408889634f;
  launch(prefill_kernel<HD>, grid, kThreads, smem_bytes<HD>(), s, q, heads, kv, seqs, tiles, scale * kLog2e, out);
}

}  // namespace

bool prefill_attention_supported(int head_dim) { return head_dim == 64 || head_dim == 128; }

void prefill_attention(const uint16_t* q, int heads, const PagedKv& kv, const int32_t* seqs, int num_seqs,
                       int max_query_len, float scale, uint16_t* out, cudaStream_t s) {
  if (num_seqs == 0) return;
  if (kv.head_dim == 64) {
    launch_head_dim<64>(q, heads, kv, seqs, num_seqs, max_query_len, scale, out, s);
  } else {
    launch_head_dim<128>(q, heads, kv, seqs, num_seqs, max_query_len, scale, out, s);
  }
}

}  // namespace photon::cuda
