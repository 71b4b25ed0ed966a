// One-shot all-reduce between the GPUs of one process over peer-mapped memory (NVLink), for decode-sized messages
// whose transfer is small next to a collective's fixed cost (on 2 x H200 in a CUDA graph, 8 KB: 4.1 us here, 6.3 us
// through NCCL), and which can then be fused with the residual add and RMSNorm that follow it.
//
// Each rank's workspace (on its own GPU, mapped into every peer) holds receive slots [parity][source rank][block],
// arrival flags with the same index, and per-block call counters. Block b of every rank owns bytes
// [b * kChunkBytes, (b + 1) * kChunkBytes) of the message and runs independently of the other blocks:
//   1. push its chunk into slot [p][rank][b] of every peer (plain stores over NVLink);
//   2. publish flag [p][rank][b] = call number on every peer (release, system scope), then wait until every peer's
//      flag [p][peer][b] in its own workspace shows the same call number (acquire);
//   3. sum the chunks in rank order in f32 and write the result in place — every rank computes the same bits.
// The call number comes from block b's counter, which only block b reads and writes, so every rank numbers its calls
// alike (all ranks issue the same collectives in the same order) and graph replays keep counting. Slots alternate
// with the call number's parity: a rank can only reach call c + 2 after every peer published call c + 1, which each
// peer does after it finished reading the slots of call c.
#include <cstdio>

#include "cuda/common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"
#include "cuda/row_norm.cuh"

namespace photon::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 64;
constexpr size_t kChunkBytes = 16384;
constexpr int kChunkVecs = static_cast<int>(kChunkBytes / 16);
// A peer that has not arrived after this long never will (its rank failed): stop with an error instead of hanging.
constexpr unsigned long long kTimeoutNs = 120ull * 1000 * 1000 * 1000;

__host__ __device__ constexpr size_t recv_bytes(int size) {
  return 2 * static_cast<size_t>(size) * kMaxBlocks * kChunkBytes;
}
__host__ __device__ constexpr size_t flag_words(int size) { return 2 * static_cast<size_t>(size) * kMaxBlocks; }

__device__ __forceinline__ uint4* recv_slot(void* base, int size, int parity, int source, int block) {
  return reinterpret_cast<uint4*>(static_cast<char*>(base) +
                                  ((static_cast<size_t>(parity) * size + source) * kMaxBlocks + block) * kChunkBytes);
}
__device__ __forceinline__ uint32_t* flag_slot(void* base, int size, int parity, int source, int block) {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(base) + recv_bytes(size)) +
         (static_cast<size_t>(parity) * size + source) * kMaxBlocks + block;
}
__device__ __forceinline__ uint32_t* call_counters(void* base, int size) {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(base) + recv_bytes(size)) + flag_words(size);
}

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v = 0;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// acc += the 16 bytes of v as 8 bf16 or 4 f32 values.
template <bool kF32>
__device__ __forceinline__ void accumulate(float (&acc)[8], const uint4& v) {
  float f[8] = {__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w)};
  if constexpr (!kF32) unpack8(v, f);
#pragma unroll
  for (int e = 0; e < (kF32 ? 4 : 8); ++e) acc[e] += f[e];
}
// The 16 bytes of 8 bf16 or 4 f32 values.
template <bool kF32>
__device__ __forceinline__ uint4 pack(const float (&acc)[8]) {
  if constexpr (kF32)
    return make_uint4(__float_as_uint(acc[0]), __float_as_uint(acc[1]), __float_as_uint(acc[2]),
                      __float_as_uint(acc[3]));
  return pack8(acc);
}

// Steps 1 and 2 for block `block`: pushes `count` vectors at `mine` to every peer and waits for theirs. Returns the
// slot parity of this call. Contains barriers.
__device__ __forceinline__ int exchange(const uint4* mine, int count, const PeerAllReduceBuffers& buf, int block) {
  const int tid = threadIdx.x, rank = buf.rank, size = buf.size;
  uint32_t* calls = call_counters(buf.base[rank], size);
  const uint32_t call = calls[block] + 1;  // read by every thread before the barriers below
  const int parity = static_cast<int>(call & 1u);
  for (int p = 1; p < size; ++p) {
    const int peer = (rank + p) % size;  // staggered, so that the ranks do not all write to one GPU first
    uint4* dst = recv_slot(buf.base[peer], size, parity, rank, block);
    for (int v = tid; v < count; v += kThreads) dst[v] = mine[v];
  }
  __syncthreads();  // the block's stores are issued before any flag that announces them
  if (tid < size && tid != rank) {
    store_release(flag_slot(buf.base[tid], size, parity, rank, block), call);
    const uint32_t* arrived = flag_slot(buf.base[rank], size, parity, tid, block);
    const unsigned long long start = now_ns();
    while (load_acquire(arrived) != call) {
      if (now_ns() - start > kTimeoutNs) {
        printf("photon: all-reduce on rank %d waited %llu s for rank %d; stopping\n", rank, kTimeoutNs / 1000000000ull,
               tid);
        __trap();
      }
    }
  }
  __syncthreads();  // every peer's chunk has arrived
  if (tid == 0) calls[block] = call;
  return parity;
}

// Vector v of the sum over ranks, in rank order (the same bits on every rank).
template <bool kF32>
__device__ __forceinline__ void sum_ranks(float (&acc)[8], const uint4* mine, int v, const PeerAllReduceBuffers& buf,
                                          int parity, int block) {
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
  for (int r = 0; r < buf.size; ++r) {
    accumulate<kF32>(acc,
                     r == buf.rank ? mine[v] : __ldcg(recv_slot(buf.base[buf.rank], buf.size, parity, r, block) + v));
  }
}

template <bool kF32>
__global__ void __launch_bounds__(kThreads) peer_all_reduce_kernel(uint4* x, int vecs, PeerAllReduceBuffers buf) {
  pdl_begin();
  const int block = blockIdx.x;
  const int begin = block * kChunkVecs, count = min(kChunkVecs, vecs - begin);
  uint4* mine = x + begin;
  const int parity = exchange(mine, count, buf, block);
  for (int v = threadIdx.x; v < count; v += kThreads) {
    float acc[8];
    sum_ranks<kF32>(acc, mine, v, buf, parity, block);
    mine[v] = pack<kF32>(acc);
  }
}

// One block per row of `dim` bf16 values: the row of x is all-reduced (rounded to bf16, as all_reduce_sum leaves
// it), added to the residual in bf16, and the residual's RMSNorm times w written to out — the arithmetic of
// all_reduce_sum followed by add_rms_norm, with add_rms_norm's own code (row_norm.cuh).
constexpr int kNormVecs = kChunkVecs / kThreads;  // 16-byte vectors per thread at the widest row
__global__ void __launch_bounds__(kThreads)
    peer_all_reduce_add_rms_norm_kernel(const uint4* x, int dim, uint4* residual, const float* w, float eps, uint4* out,
                                        PeerAllReduceBuffers buf) {
  __shared__ float scratch[32];
  const int row = blockIdx.x, count = dim / 8;
  float ws[kNormVecs][8];
  load_norm_weights<kNormVecs, kThreads>(w, count, ws);  // before the wait: they are constant
  pdl_begin();
  const uint4* mine = x + static_cast<int64_t>(row) * count;
  uint4* res = residual + static_cast<int64_t>(row) * count;
  const int parity = exchange(mine, count, buf, row);
  float v[kNormVecs][8];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kNormVecs; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i >= count) break;
    float sum[8], r[8];
    sum_ranks<false>(sum, mine, i, buf, parity, row);
    unpack8(res[i], r);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[j][e] = bf2f(f2bf(r[e] + bf2f(f2bf(sum[e]))));
    res[i] = pack8(v[j]);
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[j][e] * v[j][e];
  }
  write_rms_norm<kNormVecs, kThreads>(v, ws, ss, count, dim, eps, out + static_cast<int64_t>(row) * count, scratch);
}

}  // namespace

size_t peer_all_reduce_workspace_bytes(int size) {
  return recv_bytes(size) + (flag_words(size) + kMaxBlocks) * sizeof(uint32_t);
}

bool peer_all_reduce_fits(const void* x, size_t bytes) {
  return bytes > 0 && bytes % 16 == 0 && bytes <= kMaxBlocks * kChunkBytes && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

bool peer_all_reduce_add_rms_norm_fits(int rows, int dim) {
  return rows >= 1 && rows <= kMaxBlocks && dim % 8 == 0 && static_cast<size_t>(dim) * 2 <= kChunkBytes;
}

void peer_all_reduce_add_rms_norm(const uint16_t* x, int rows, int dim, uint16_t* residual, const float* w, float eps,
                                  uint16_t* out, const PeerAllReduceBuffers& buffers, cudaStream_t s) {
  launch(peer_all_reduce_add_rms_norm_kernel, rows, kThreads, 0, s, reinterpret_cast<const uint4*>(x), dim,
         reinterpret_cast<uint4*>(residual), w, eps, reinterpret_cast<uint4*>(out), buffers);
}

void peer_all_reduce(void* x, size_t bytes, bool f32, const PeerAllReduceBuffers& buffers, cudaStream_t s) {
  const int vecs = static_cast<int>(bytes / 16);
  const int blocks = (vecs + kChunkVecs - 1) / kChunkVecs;
  if (f32) {
    launch(peer_all_reduce_kernel<true>, blocks, kThreads, 0, s, static_cast<uint4*>(x), vecs, buffers);
  } else {
    launch(peer_all_reduce_kernel<false>, blocks, kThreads, 0, s, static_cast<uint4*>(x), vecs, buffers);
  }
}

}  // namespace photon::cuda
