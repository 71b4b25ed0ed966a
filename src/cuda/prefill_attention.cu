// Causal attention for prompt chunks on tensor cores, FlashAttention-2 style.
//
// A block owns 64 consecutive query tokens of one sequence and one head (4 warps, 16 query rows each). It walks
// the keys its queries can see in tiles of 64: the K and V tiles are gathered from the paged cache into shared
// memory once and serve all 64 queries (instead of every query re-reading its context), S = Q K^T and O += P V run
// as bf16 WMMA (16x16x16) with f32 accumulation, and an online softmax per row rescales O between tiles. Only
// tiles at or below the causal diagonal are visited.
#include <mma.h>

#include "cuda/common.cuh"
#include "cuda/kernels.cuh"

namespace photon::cuda {
namespace {

using namespace nvcuda;

constexpr int kBlockQ = 64;
constexpr int kBlockK = 64;
constexpr int kWarps = 4;

template <int HD>
struct Smem {
  __nv_bfloat16 q[kBlockQ][HD];
  __nv_bfloat16 k[kBlockK][HD];
  __nv_bfloat16 v[kBlockK][HD];
  float s[kBlockQ][kBlockK];
  __nv_bfloat16 p[kBlockQ][kBlockK];
  float o[kBlockQ][HD];
  float row_max[kBlockQ];
  float row_sum[kBlockQ];
};

template <int HD>
__global__ void __launch_bounds__(kWarps * 32)
    prefill_kernel(const uint16_t* q, const uint16_t* cache, const int32_t* query_start, const int32_t* seq_lens,
                   const int32_t* block_indptr, const int32_t* block_indices, const int32_t* seqs, int tiles_per_seq,
                   int heads, int kv_heads, int block_size, float scale, uint16_t* out) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem<HD>& sm = *reinterpret_cast<Smem<HD>*>(smem_raw);
  const int seq = seqs[blockIdx.x / tiles_per_seq], tile = blockIdx.x % tiles_per_seq, h = blockIdx.y;
  const int q_len = query_start[seq + 1] - query_start[seq];
  const int q_begin = tile * kBlockQ;
  if (q_begin >= q_len) return;
  const int rows = min(kBlockQ, q_len - q_begin);
  const int first_pos = seq_lens[seq] - q_len + q_begin;  // position of query row 0
  const int last_pos = first_pos + rows - 1;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int kvh = h / (heads / kv_heads);
  const int32_t* blocks = block_indices + block_indptr[seq];
  const int64_t head_stride = static_cast<int64_t>(block_size) * HD;
  const int64_t block_stride = 2 * kv_heads * head_stride;
  constexpr int kVecs = HD / 8;  // 16-byte vectors per row

  // Q tile (rows past the chunk are zero), O = 0, running max / sum.
  for (int i = tid; i < kBlockQ * kVecs; i += kWarps * 32) {
    const int r = i / kVecs, c = i % kVecs;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < rows) {
      const int64_t token = query_start[seq] + q_begin + r;
      val = *reinterpret_cast<const uint4*>(q + (token * heads + h) * HD + c * 8);
    }
    *reinterpret_cast<uint4*>(&sm.q[r][c * 8]) = val;
  }
  for (int i = tid; i < kBlockQ * HD; i += kWarps * 32) sm.o[i / HD][i % HD] = 0.0f;
  for (int i = tid; i < kBlockQ; i += kWarps * 32) {
    sm.row_max[i] = -INFINITY;
    sm.row_sum[i] = 0.0f;
  }

  const int num_keys = last_pos + 1;
  for (int k0 = 0; k0 < num_keys; k0 += kBlockK) {
    __syncthreads();  // the previous tile's K/V/P are no longer read
    for (int i = tid; i < kBlockK * kVecs; i += kWarps * 32) {
      const int r = i / kVecs, c = i % kVecs, key = k0 + r;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (key < num_keys) {
        const uint16_t* base = cache + blocks[key / block_size] * block_stride + kvh * head_stride +
                               static_cast<int64_t>(key % block_size) * HD + c * 8;
        kv = *reinterpret_cast<const uint4*>(base);
        vv = *reinterpret_cast<const uint4*>(base + kv_heads * head_stride);
      }
      *reinterpret_cast<uint4*>(&sm.k[r][c * 8]) = kv;
      *reinterpret_cast<uint4*>(&sm.v[r][c * 8]) = vv;
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows.
    const int r0 = warp * 16;
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kBlockK / 16];
#pragma unroll
      for (int n = 0; n < kBlockK / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::load_matrix_sync(a, &sm.q[r0][kk * 16], HD);
#pragma unroll
        for (int n = 0; n < kBlockK / 16; ++n) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
          wmma::load_matrix_sync(b, &sm.k[n * 16][kk * 16], HD);
          wmma::mma_sync(acc[n], a, b, acc[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < kBlockK / 16; ++n) {
        wmma::store_matrix_sync(&sm.s[r0][n * 16], acc[n], kBlockK, wmma::mem_row_major);
      }
    }
    __syncwarp();

    // Online softmax on the warp's rows: two lanes per row, 32 columns each.
    {
      const int r = r0 + lane / 2, half = lane % 2;
      const int pos = first_pos + r;
      float mx = -INFINITY;
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        const bool visible = r < rows && k0 + c <= pos;
        const float sv = visible ? sm.s[r][c] * scale : -INFINITY;
        sm.s[r][c] = sv;
        mx = fmaxf(mx, sv);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float old_max = sm.row_max[r];
      const float new_max = fmaxf(old_max, mx);
      // Rows with nothing visible yet keep a zero contribution (their max stays -inf).
      const float alpha = new_max == -INFINITY ? 1.0f : __expf(old_max - new_max);
      float sum = 0.0f;
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        const float p = new_max == -INFINITY ? 0.0f : __expf(sm.s[r][c] - new_max);
        sm.p[r][c] = __float2bfloat16_rn(p);
        sum += p;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      for (int d = half; d < HD; d += 2) sm.o[r][d] *= alpha;
      __syncwarp();
      if (half == 0) {
        sm.row_max[r] = new_max;
        sm.row_sum[r] = sm.row_sum[r] * alpha + sum;
      }
    }
    __syncwarp();

    // O += P V for the warp's rows.
#pragma unroll
    for (int n = 0; n < HD / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> o;
      wmma::load_matrix_sync(o, &sm.o[r0][n * 16], HD, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
        wmma::load_matrix_sync(a, &sm.p[r0][kk * 16], kBlockK);
        wmma::load_matrix_sync(b, &sm.v[kk * 16][n * 16], HD);
        wmma::mma_sync(o, a, b, o);
      }
      wmma::store_matrix_sync(&sm.o[r0][n * 16], o, HD, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int i = tid; i < rows * HD; i += kWarps * 32) {
    const int r = i / HD, d = i % HD;
    const int64_t token = query_start[seq] + q_begin + r;
    out[(token * heads + h) * HD + d] = f2bf(sm.o[r][d] / sm.row_sum[r]);
  }
}

template <int HD>
void launch(const uint16_t* q, const uint16_t* cache, const int32_t* query_start, const int32_t* seq_lens,
            const int32_t* block_indptr, const int32_t* block_indices, const int32_t* seqs, int num_seqs,
            int max_query_len, int heads, int kv_heads, int block_size, float scale, uint16_t* out, cudaStream_t s) {
  static bool configured = false;  // the attribute is per kernel and process-wide
  if (!configured) {
    cudaFuncSetAttribute(prefill_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(sizeof(Smem<HD>)));
    configured = true;
  }
  const int tiles = (max_query_len + kBlockQ - 1) / kBlockQ;
  const dim3 grid(static_cast<unsigned>(num_seqs * tiles), static_cast<unsigned>(heads));
  prefill_kernel<HD><<<grid, kWarps * 32, sizeof(Smem<HD>), s>>>(q, cache, query_start, seq_lens, block_indptr,
                                                                 block_indices, seqs, tiles, heads, kv_heads,
                                                                 block_size, scale, out);
}

}  // namespace

bool prefill_attention_supported(int head_dim) { return head_dim == 64 || head_dim == 128; }

void prefill_attention(const uint16_t* q, const uint16_t* cache, const int32_t* query_start, const int32_t* seq_lens,
                       const int32_t* block_indptr, const int32_t* block_indices, const int32_t* seqs, int num_seqs,
                       int max_query_len, int heads, int kv_heads, int head_dim, int block_size, float scale,
                       uint16_t* out, cudaStream_t s) {
  if (num_seqs == 0) return;
  if (head_dim == 64) {
    launch<64>(q, cache, query_start, seq_lens, block_indptr, block_indices, seqs, num_seqs, max_query_len, heads,
               kv_heads, block_size, scale, out, s);
  } else {
    launch<128>(q, cache, query_start, seq_lens, block_indptr, block_indices, seqs, num_seqs, max_query_len, heads,
                kv_heads, block_size, scale, out, s);
  }
}

}  // namespace photon::cuda
