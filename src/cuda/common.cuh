// Device helpers shared by the kernels: bf16 conversion and 16-byte packing, block-wide reductions and asynchronous
// copies.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace photon::cuda {

__device__ __forceinline__ float bf2f(uint16_t v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }
__device__ __forceinline__ uint16_t f2bf(float f) {
  const __nv_bfloat16 b = __float2bfloat16_rn(f);
  return *reinterpret_cast<const uint16_t*>(&b);
}

/// The 8 bf16 values of a 16-byte vector as f32.
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    f[2 * e] = __uint_as_float(w[e] << 16);
    f[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
  }
}
/// 8 f32 values rounded to bf16, as one 16-byte vector.
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int e = 0; e < 4; ++e)
    w[e] = static_cast<uint32_t>(f2bf(f[2 * e])) | (static_cast<uint32_t>(f2bf(f[2 * e + 1])) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds at least 32 floats. Contains barriers.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

/// A token position's page and offset in a paged cache of `size` tokens a page: a shift and a mask when the size is a
/// power of two (the usual 16), an integer division otherwise (tens of instructions, paid per row a kernel gathers).
struct PageSplit {
  int size;
  int shift = 0;  // log2(size) when pow2
  bool pow2;

  __device__ __forceinline__ explicit PageSplit(int page_size)
      : size(page_size), pow2((page_size & (page_size - 1)) == 0) {
    while ((1 << shift) < page_size) ++shift;  // once per thread, at most 10 steps
  }
  __device__ __forceinline__ int page(int pos) const { return pow2 ? pos >> shift : pos / size; }
  __device__ __forceinline__ int offset(int pos) const { return pow2 ? pos & (size - 1) : pos % size; }
};

// Asynchronous 16-byte copies from global to shared memory (sm_80+): zero-filled when !valid. Commit groups them;
// wait<N> returns when at most N groups are still in flight.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid = true) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  // The clobber keeps earlier reads of the slot being refilled before the copy.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");  // later reads of the copied data stay after it
}

}  // namespace photon::cuda
