// W8A16 GEMM on Hopper's warpgroup tensor-core instructions (sm_90a) for batches beyond the decode kernels:
// out[m, n] = sum_k x[m, k] * bf16(q[n, k] * scale[n, k / group]), bf16 activations x [M, K], group-wise int8
// weights q [N, K] (row-major, as stored), f32 accumulation — the sums the int8 -> bf16 widening followed by a bf16
// GEMM computes, reading each weight as one byte instead of widening it through memory first.
//
// A block owns 128 weight rows (output features) and `kTok` activation rows (tokens), in three warpgroups:
// - the first is the producer: one thread streams the weights (a 128 x 64-byte tile, TMA with the 64-byte swizzle)
//   and the activations (a kTok x 64 bf16 tile, TMA with the 128-byte swizzle that wgmma reads) of each 64-column
//   step into a ring of stages, and one warp copies the step's scales beside them; a stage is published on its
//   "full" mbarrier by the copies' bytes and the scale warp's arrivals. The weights and scales of the first stages
//   are requested before the PDL wait (they are constants);
// - the other two each own 64 weight rows: they read their int8 fragments from shared memory, widen and scale them
//   in registers (bf16(q * scale), the widening kernel's exact values) into wgmma's A operand, and multiply with the
//   activation tile as wgmma's B operand (m64 x kTok x 16 per instruction, f32 accumulators in registers); the next
//   stage's fragments are widened while the current stage's MMAs run, then the warpgroup frees the stage on its
//   "empty" mbarrier. The weights' tensor-core role is A because only A may come from registers; so the product
//   computed is out^T, and the epilogue transposes it through shared memory into coalesced rows of out.
// The two consumer warpgroups are not kept in step: while one widens a stage's weights the other's MMAs run.
// Where the grid is too small for the GPU, K is split over a thread block cluster: each block stages its f32 partial
// tile and the cluster adds them through distributed shared memory (split_reduce). Every block re-reads its token tile
// at every step; pairing blocks in a cluster to copy it once for two (TMA multicast) made every shape slower, as the
// two blocks' pipelines then wait on each other at every stage (docs/performance.md, 2026-12-04 evening and
// 2026-12-05). Large M stays with widening + cuBLASLt (w8a16_gemm_pays).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"
#include "cuda/mma.cuh"

namespace photon::cuda {
namespace {

// The device code exists in the sm_90a compilation only (and in the host pass, which sees the declarations); for
// other targets the kernel compiles to an empty body that the host never launches (w8a16_gemm_available()).
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PHOTON_W8A16_DEVICE
#endif

constexpr int kRows = 128;                    // weight rows a block: two consumer warpgroups of 64
constexpr int kStepK = 64;                    // k columns a stage: one 128-byte swizzle row of bf16 activations
constexpr int kThreads = 384;                 // the producer warpgroup and two consumers
constexpr int kWeightBytes = kRows * kStepK;  // a stage's weights: 8 KiB
constexpr int kRingBytes = 200 * 1024;        // shared memory for the ring (one block an SM)

template <int kTok>
constexpr int kActBytes = kTok* kStepK * 2;  // a stage's activations
template <int kTok>
constexpr int kStageBytes = kActBytes<kTok> + kWeightBytes;
template <int kTok>
constexpr int kStages = kRingBytes / kStageBytes<kTok> < 8 ? kRingBytes / kStageBytes<kTok> : 8;
// Leading dimension (elements) of the epilogue's staging tile [kTok][kRows + pad]: the pad spreads the rows that
// one store instruction writes over the banks.
template <bool kF32>
constexpr int kStageLd = kF32 ? kRows + 4 : kRows + 8;

#ifdef PHOTON_W8A16_DEVICE
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers and TMA ----
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Returns once the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// The box of `map` at (c0 along the contiguous dimension, c1) into shared memory; its bytes complete `bar`'s
// transaction count. Out-of-range elements arrive as zeros.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
// A 4-byte asynchronous copy, and an arrival on `bar` once this thread's earlier asynchronous copies have landed
// (counted in the barrier's expected arrivals).
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Synchronises the 256 consumer threads only (named barrier 1).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

// ---- warpgroup MMA: A (64 x 16 bf16) from registers, B (16 x N) from shared memory ----
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Pins the accumulators here in the instruction stream (no read or write of them moves across it).
template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Descriptor of a K-major B tile in the 128-byte swizzle TMA writes: rows of 128 bytes, 8-row atoms 1,024 bytes apart
// (PTX ISA, "Matrix Descriptor Format"); the k16 slice j of a stage starts 32 j bytes in.
__device__ __forceinline__ uint64_t b_desc(const void* p) {
  return static_cast<uint64_t>((smem_addr(p) & 0x3FFFF) >> 4) | static_cast<uint64_t>(1) << 16 |
         static_cast<uint64_t>(1024 >> 4) << 32 | static_cast<uint64_t>(1) << 62;
}
// clang-format off  (generated operand lists: one line per instruction)
__device__ __forceinline__ void wgmma_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%"
      "30,%31}, "
      "{%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
__device__ __forceinline__ void wgmma_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%"
      "30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%"
      "58,%59,%60,%61,%62,%63}, "
      "{%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
__device__ __forceinline__ void wgmma_n256(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%"
      "30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%"
      "58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%"
      "86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%"
      "111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
      "{%128,%129,%130,%131}, %132, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),
        "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]),
        "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]),
        "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]),
        "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]),
        "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),
        "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]),
        "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]),
        "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
// clang-format on
template <int kTok>
__device__ __forceinline__ void wgmma_tile(float (&d)[kTok / 2], const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (kTok == 64) {
    wgmma_n64(d, a, desc_b);
  } else if constexpr (kTok == 128) {
    wgmma_n128(d, a, desc_b);
  } else {
    wgmma_n256(d, a, desc_b);
  }
}

// Two int8 weights (the low and high byte of `pair`) times `scale`, rounded to a bf16 pair: each byte is placed in
// the low mantissa of 2^23 (offset by 128), so one subtraction gives the exact integer, and the product rounds once,
// as the widening kernel's float(q) * scale does.
__device__ __forceinline__ uint32_t dequant2(uint32_t pair, float scale) {
  const uint32_t biased = pair ^ 0x8080u;
  const float lo = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7650)) - 8388736.0f;
  const float hi = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7651)) - 8388736.0f;
  return pack_bf16(lo * scale, hi * scale);
}
__device__ __forceinline__ uint32_t lds_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

// The split-K epilogue, run by every thread of each block of the cluster once its consumers have staged their f32
// partial tile [token][row] (rows kStageLd<true> apart) at `ring`: block z of the cluster adds, in rank order, the
// partials of its share of the tile's tokens from every block's shared memory and writes them to out.
template <int kTok, bool kF32>
__device__ __forceinline__ void split_reduce(const uint8_t* ring, int m, int n, int row0, int tok0, void* out) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's partials staged
  const int splits = static_cast<int>(gridDim.z), rank = static_cast<int>(blockIdx.z);
  constexpr int ld = kStageLd<true>, kVecs = kRows / 4;  // float4 columns of a tile row
  const int toks = min(kTok, m - tok0), rows = min(kRows, n - row0);
  const int begin = rank * toks / splits, end = (rank + 1) * toks / splits;
  const float* tile = reinterpret_cast<const float*>(ring);
  for (int c = begin * kVecs + static_cast<int>(threadIdx.x); c < end * kVecs; c += kThreads) {
    const int tok = c / kVecs, col = (c % kVecs) * 4;
    if (col >= rows) continue;
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int p = 0; p < splits; ++p) {
      const float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(tile, p) + tok * ld + col);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    const int64_t at = static_cast<int64_t>(tok0 + tok) * n + row0 + col;
    if constexpr (kF32) {
      *reinterpret_cast<float4*>(static_cast<float*>(out) + at) = sum;
    } else {
      *reinterpret_cast<uint2*>(static_cast<uint16_t*>(out) + at) =
          make_uint2(pack_bf16(sum.x, sum.y), pack_bf16(sum.z, sum.w));
    }
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
}

#endif  // PHOTON_W8A16_DEVICE

template <int kTok, bool kF32, bool kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    w8a16_gemm_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap,
                      const float* __restrict__ scales, int groups, int group, int n, int m, int k,
                      void* __restrict__ out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int S = kStages<kTok>;
  constexpr int kAct = kActBytes<kTok>, kStage = kStageBytes<kTok>;
  extern __shared__ uint8_t dynamic_smem[];
  // The 128-byte swizzle repeats every 1,024 bytes and the hardware applies it to absolute addresses: align the ring.
  // Offset from the shared array itself rather than rounded as an integer: the compiler then still knows that every
  // access through `ring` is to shared memory and emits shared loads and stores, not generic ones (4-16% of the
  // kernel's time, docs/performance.md, 2026-12-05 evening).
  uint8_t* ring = dynamic_smem + ((1024 - (smem_addr(dynamic_smem) & 1023)) & 1023);
  __shared__ __align__(8) uint64_t full[S], empty[S];
  // Each stage's scales: [first / second half of the step][tile row] (the halves differ only for 32-column groups).
  __shared__ float stage_scales[S][2][kRows];

  const int row0 = blockIdx.x * kRows, tok0 = blockIdx.y * kTok;
  // Split K: the blocks of a cluster (blockIdx.z) each take an equal run of the steps.
  const int steps = k / kStepK, kt0 = static_cast<int>(blockIdx.z) * steps / static_cast<int>(gridDim.z);
  const int tiles = (static_cast<int>(blockIdx.z) + 1) * steps / static_cast<int>(gridDim.z) - kt0;
  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(&full[s], 1 + 32);  // the copying thread's expect_tx and the scale warp's 32 lanes
      mbar_init(&empty[s], 256);    // every consumer thread, after its last read of the stage
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == 0) {  // producer
    setmaxnreg_dec<40>();
    if (threadIdx.x / 32 == 1) {  // the scale warp: each stage's 2 x 128 scales into stage_scales
      const int lane = threadIdx.x % 32;
      for (int kt = 0; kt < tiles; ++kt) {
        const int s = kt % S;
        if (kt == S) pdl_begin();
        if (kt >= S) mbar_wait(&empty[s], (kt / S - 1) & 1);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const int i = lane + 32 * e, half = i / kRows, row = i % kRows;
          const int group_index = ((kt0 + kt) * kStepK + 32 * half) / group;
          cp_async4(&stage_scales[s][half][row],
                    scales + static_cast<int64_t>(min(row0 + row, n - 1)) * groups + group_index);
        }
        cp_async_arrive(&full[s]);
      }
      if (tiles <= S) pdl_begin();
    } else if (threadIdx.x == 0) {
      const int first = min(S, tiles);
      for (int kt = 0; kt < first; ++kt) {
        mbar_expect_tx(&full[kt], kStage);
        tma_load(ring + kt * kStage + kAct, &wmap, (kt0 + kt) * kStepK, row0, &full[kt]);
      }
      pdl_begin();
      for (int kt = 0; kt < first; ++kt) tma_load(ring + kt * kStage, &xmap, (kt0 + kt) * kStepK, tok0, &full[kt]);
      for (int kt = first; kt < tiles; ++kt) {
        const int s = kt % S;
        mbar_wait(&empty[s], (kt / S - 1) & 1);
        mbar_expect_tx(&full[s], kStage);
        tma_load(ring + s * kStage + kAct, &wmap, (kt0 + kt) * kStepK, row0, &full[s]);
        tma_load(ring + s * kStage, &xmap, (kt0 + kt) * kStepK, tok0, &full[s]);
      }
    } else {
      pdl_begin();
    }
    if constexpr (kSplit) split_reduce<kTok, kF32>(ring, m, n, row0, tok0, out);
    return;
  }

  setmaxnreg_inc<232>();
  pdl_begin();  // out may still be read by the kernel before
  const int wg = warpgroup - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r = wg * 64 + warp * 16 + g;  // tile row of fragments a0 / a2; r + 8 for a1 / a3
  // Byte offset of this lane's pair in row r of a stage's weights, k16 slice j: the 64-byte swizzle moves 16-byte
  // chunk j of row r to chunk j ^ ((r / 2) % 4) (row r + 8 has the same pattern).
  const int swz = (r >> 1) & 3;

  float acc[kTok / 2];
#pragma unroll
  for (int i = 0; i < kTok / 2; ++i) acc[i] = 0.0f;
  fence_acc(acc);  // each accumulator its own zero before the first wgmma

  // Waits for step kt's stage and widens this thread's weight fragments of it into `a` (slice j: a[j]).
  const auto widen = [&](int kt, uint32_t(&a)[4][4]) {
    const int s = kt % S;
    mbar_wait(&full[s], (kt / S) & 1);
    const uint8_t* w = ring + s * kStage + kAct;
    const float s0a = stage_scales[s][0][r], s0b = stage_scales[s][1][r];
    const float s1a = stage_scales[s][0][r + 8], s1b = stage_scales[s][1][r + 8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint8_t* p0 = w + r * kStepK + ((j ^ swz) << 4) + 2 * t;
      const uint8_t* p1 = p0 + 8 * kStepK;
      const float s0 = j < 2 ? s0a : s0b, s1 = j < 2 ? s1a : s1b;
      a[j][0] = dequant2(lds_u16(p0), s0);
      a[j][1] = dequant2(lds_u16(p1), s1);
      a[j][2] = dequant2(lds_u16(p0 + 8), s0);
      a[j][3] = dequant2(lds_u16(p1 + 8), s1);
    }
  };
  // Step kt's MMAs from `cur`; the next step's fragments are widened into `next` while they run.
  const auto step = [&](int kt, const uint32_t(&cur)[4][4], uint32_t(&next)[4][4]) {
    const int s = kt % S;
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; ++j) wgmma_tile<kTok>(acc, cur[j], b_desc(ring + s * kStage + 32 * j));
    wgmma_commit();
    if (kt + 1 < tiles) widen(kt + 1, next);
    wgmma_wait_all();
    mbar_arrive(&empty[s]);
  };
  uint32_t a0[4][4], a1[4][4];
  widen(0, a0);
  int kt = 0;
  for (; kt + 1 < tiles; kt += 2) {
    step(kt, a0, a1);
    step(kt + 1, a1, a0);
  }
  if (kt < tiles) step(kt, a0, a1);

  // Epilogue: acc holds out^T for rows r, r + 8 and tokens 8 i + 2 t (+1); stage it as [token][row] in the ring
  // (every stage has been consumed), then write whole rows of out — or, split, stage the f32 partial sums and add
  // the cluster's partials.
  using Staged = std::conditional_t<kF32 || kSplit, float, uint16_t>;
  constexpr int ld = kStageLd < kF32 || kSplit > ;
  Staged* tile = reinterpret_cast<Staged*>(ring);
  consumers_sync();
#pragma unroll
  for (int i = 0; i < kTok / 8; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int tok = 8 * i + 2 * t + (e & 1), row = r + (e >> 1) * 8;
      if constexpr (std::is_same_v<Staged, float>) {
        tile[tok * ld + row] = acc[4 * i + e];
      } else {
        tile[tok * ld + row] = f2bf(acc[4 * i + e]);
      }
    }
  }
  if constexpr (kSplit) {
    split_reduce<kTok, kF32>(ring, m, n, row0, tok0, out);
    return;
  }
  consumers_sync();
  constexpr int kChunks = kRows * sizeof(Staged) / 16;  // 16-byte chunks of a tile row
  const int toks = min(kTok, m - tok0), rows = min(kRows, n - row0);
  for (int c = threadIdx.x - 128; c < toks * kChunks; c += 256) {
    const int tok = c / kChunks, col = (c % kChunks) * (16 / static_cast<int>(sizeof(Staged)));
    if (col >= rows) continue;
    *reinterpret_cast<uint4*>(static_cast<Staged*>(out) + static_cast<int64_t>(tok0 + tok) * n + row0 + col) =
        *reinterpret_cast<const uint4*>(tile + tok * ld + col);
  }
#endif
}

// cuTensorMapEncodeTiled from the driver, found through the runtime (no link against libcuda); null if missing.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const auto fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A 2-D row-major tensor map: `rows` rows of `cols` elements, `ld_bytes` apart, read in boxes of box_cols x box_rows.
bool make_map(CUtensorMap* map, CUtensorMapDataType type, const void* base, uint64_t cols, uint64_t rows,
              uint64_t ld_bytes, uint32_t box_cols, uint32_t box_rows, CUtensorMapSwizzle swizzle) {
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {ld_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode_tiled()(map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int kTok, bool kF32, bool kSplit>
cudaError_t launch_gemm(const CUtensorMap& wmap, const CUtensorMap& xmap, const Int8Weights& w, int n, int m, int k,
                        void* out, int splits, cudaStream_t s) {
  auto* kernel = w8a16_gemm_kernel<kTok, kF32, kSplit>;
  constexpr int smem = kStages<kTok> * kStageBytes<kTok> + 1024;  // + alignment slack
  static_assert(kTok * kStageLd<true> * 4 <= kStages<kTok> * kStageBytes<kTok>);
  // Above 48 KiB of shared memory needs an opt-in, per device: set it on every launch (a cheap host call).
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const dim3 grid((n + kRows - 1) / kRows, (m + kTok - 1) / kTok, splits);
  return launch_clusters(kernel, grid, kThreads, smem, s, dim3(1, 1, splits), wmap, xmap, w.scales, w.groups, w.group,
                         n, m, k, out);
}

template <int kTok>
cudaError_t launch_tok(const CUtensorMap& wmap, const CUtensorMap& xmap, const Int8Weights& w, int n, int m, int k,
                       void* out, bool out_f32, int splits, cudaStream_t s) {
  if (splits > 1) {
    return out_f32 ? launch_gemm<kTok, true, true>(wmap, xmap, w, n, m, k, out, splits, s)
                   : launch_gemm<kTok, false, true>(wmap, xmap, w, n, m, k, out, splits, s);
  }
  return out_f32 ? launch_gemm<kTok, true, false>(wmap, xmap, w, n, m, k, out, 1, s)
                 : launch_gemm<kTok, false, false>(wmap, xmap, w, n, m, k, out, 1, s);
}

}  // namespace

bool w8a16_gemm_available() {
#ifdef PHOTON_CUDA_SM90A
  static const bool available = [] {
    int device = 0, major = 0, minor = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    return major == 9 && minor == 0 && encode_tiled() != nullptr;
  }();
  return available;
#else
  return false;
#endif
}

bool w8a16_gemm_supported(int m, int n, int k, int64_t ldx, const void* x, int group) {
  return w8a16_gemm_available() && m > 0 && n % 8 == 0 && k % kStepK == 0 && group % 32 == 0 && ldx % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

W8a16GemmPlan w8a16_gemm_plan(int m, int n, int k) {
  // Measured on the H200 (docs/performance.md, 2026-12-04, evening): 64-token tiles up to 64 rows; above, the
  // widest tile whose grid fills 70% of the SMs (256 tokens), else 128. A grid short of that splits K over 4 (64-token
  // tiles) or 2 blocks: more splits add blocks that each re-read the activations, and the kernel is bound by that
  // traffic from L2 before the weights' from memory.
  // Matrices of at most 8 row blocks (N <= 1024) keep 64-token tiles up to 192 rows: their grids of 128-token tiles
  // are a few blocks (2026-12-06, H100: qwen3-0.6b o and down at 96-192 rows 64/4 7.3-10.2 us against 128/2
  // 12.4-17.0). Every split keeps >= 8 steps of K: a 16-step K split 4 ways spent its blocks filling and reducing
  // (qwen3-0.6b q/k/v at 24-64 rows 64/4 10.4-11.9 against 7.4-8.1 for 128/2 and 64/1).
  const int sms = sm_count(), row_blocks = (n + kRows - 1) / kRows;
  const auto blocks = [&](int tok) { return static_cast<int64_t>(row_blocks) * ((m + tok - 1) / tok); };
  const auto fills = [&](int tok) { return blocks(tok) * 10 >= static_cast<int64_t>(sms) * 7; };
  const bool narrow = row_blocks <= 8 && m <= 192;
  W8a16GemmPlan plan{m <= 64 || narrow ? 64 : m > 128 && fills(256) ? 256 : 128, 1};
  if (!fills(plan.token_tile)) {
    const int64_t fill = std::max<int64_t>(1, sms / blocks(plan.token_tile));
    plan.splits = static_cast<int>(
        std::min<int64_t>({plan.token_tile == 64 ? 4 : 2, fill, std::max<int64_t>(1, k / (kStepK * 8))}));
  }
  // Above 128 rows, a grid of 128-token tiles still under 3/4 of the SMs takes 256-token tiles split twice as deep
  // (as many blocks, each copying its token tile once per step for all the rows) where every block keeps >= 32 steps
  // (2026-12-05 evening: llama-3.2-1b down at 256 rows 256/4 32.7 µs against 128/2 40.3, llama-3.1-8b q/k/v 256/2
  // 33.0 against 128/1 38.0; llama-3.2-1b q/k/v, 8 steps a block at 256/4, 15.2 against 14.4 stays at 128/2).
  if (m > 128 && plan.token_tile == 128 && blocks(128) * plan.splits * 4 <= static_cast<int64_t>(sms) * 3 &&
      k / (kStepK * 2 * plan.splits) >= 32) {
    plan = {256, 2 * plan.splits};
  }
  return plan;
}

bool w8a16_gemm_pays(int64_t m, int64_t n, int64_t k) {
  // Against widening + cuBLASLt, same source: every projection shape up to 64 rows; up to 256 rows the wide ones
  // (q/k/v, gate/up, Llama-3.1-8B's down), and from 129 rows the long ones (K >= 4 N: Llama-3.2-1B's down, which
  // the plan then cuts into 256-token tiles split 4 deep); up to 192 rows the narrow ones of K >= 2048 (N <= 1024:
  // Qwen3-0.6B's o and down, 64-token tiles split 4 deep: 7.3-10.2 us against widening's 9.0-12.3 on an H100);
  // beyond, cuBLASLt's bf16 GEMM runs nearer the tensor cores' peak and the widening is a small share.
  return m <= 64 || (m <= 256 && n >= 3072) || (m > 128 && m <= 256 && k >= 4 * n) ||
         (m <= 192 && n <= 1024 && k >= 2048);
}

bool w8a16_gemm(const uint16_t* x, int m, int64_t ldx, const Int8Weights& w, int n, int k, void* out, bool out_f32,
                cudaStream_t s, W8a16GemmPlan plan) {
  if (!w8a16_gemm_supported(m, n, k, ldx, x, w.group) || reinterpret_cast<uintptr_t>(out) % 16 != 0) return false;
  if (plan.token_tile == 0) plan = w8a16_gemm_plan(m, n, k);
  const int tok = plan.token_tile, splits = std::clamp(plan.splits, 1, std::min(8, k / kStepK));
  if (tok != 64 && tok != 128 && tok != 256) return false;
  CUtensorMap wmap, xmap;
  if (!make_map(&wmap, CU_TENSOR_MAP_DATA_TYPE_UINT8, w.values, k, n, k, kStepK, kRows, CU_TENSOR_MAP_SWIZZLE_64B) ||
      !make_map(&xmap, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, x, k, m, ldx * 2, kStepK, tok, CU_TENSOR_MAP_SWIZZLE_128B)) {
    return false;
  }
  cudaError_t err = cudaSuccess;
  switch (tok) {
    case 64:
      err = launch_tok<64>(wmap, xmap, w, n, m, k, out, out_f32, splits, s);
      break;
    case 128:
      err = launch_tok<128>(wmap, xmap, w, n, m, k, out, out_f32, splits, s);
      break;
    default:
      err = launch_tok<256>(wmap, xmap, w, n, m, k, out, out_f32, splits, s);
      break;
  }
  if (err != cudaSuccess) {
    cudaGetLastError();  // a launch the device refused (e.g. its clusters): nothing ran; the caller widens instead
    return false;
  }
  return true;
}

}  // namespace photon::cuda
