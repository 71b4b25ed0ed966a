// Group-wise int8 weights on the GPU: quantization at load (one warp per group of a row) and dequantization to bf16
// for the tensor-core GEMM of large batches.
#include "cuda/common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"

namespace photon::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const uint16_t* __restrict__ w, int64_t n, int64_t k, int group, int groups,
                    int8_t* __restrict__ values, float* __restrict__ scales) {
  pdl_begin();
  const int64_t g_global = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (g_global >= n * groups) return;
  const int64_t row = g_global / groups;
  const int64_t begin = (g_global % groups) * group;
  const int64_t end = min(begin + group, k);
  const uint16_t* src = w + row * k;
  float max_abs = 0.0f;
  for (int64_t c = begin + lane; c < end; c += 32) max_abs = fmaxf(max_abs, fabsf(bf2f(src[c])));
  max_abs = warp_max(max_abs);
  const float scale = __fdiv_rn(max_abs, 127.0f);
  if (lane == 0) scales[g_global] = scale;
  for (int64_t c = begin + lane; c < end; c += 32) {
    const int q = scale == 0.0f ? 0 : __float2int_rn(__fdiv_rn(bf2f(src[c]), scale));
    values[row * k + c] = static_cast<int8_t>(max(-127, min(127, q)));
  }
}

// Each thread widens 16 consecutive values of one row (k is a multiple of 16 and groups are multiples of 16 or k).
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(Int8Weights w, int64_t n, int64_t k, uint16_t* __restrict__ out) {
  pdl_begin();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t per_row = k / 16;
  if (v >= n * per_row) return;
  const int64_t row = v / per_row, col = (v % per_row) * 16;
  const float scale = w.scales[row * w.groups + col / w.group];
  const uint4 q = *reinterpret_cast<const uint4*>(w.values + row * k + col);
  const int8_t* b = reinterpret_cast<const int8_t*>(&q);
  float f[8];
  uint4 packed[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = static_cast<float>(b[h * 8 + e]) * scale;
    packed[h] = pack8(f);
  }
  uint4* dst = reinterpret_cast<uint4*>(out + row * k + col);
  dst[0] = packed[0];
  dst[1] = packed[1];
}

}  // namespace

void quantize_int8(const uint16_t* w, int64_t n, int64_t k, int group, int8_t* values, float* scales, cudaStream_t s) {
  const int groups = static_cast<int>((k + group - 1) / group);
  const int64_t warps = n * groups;
  const auto blocks = static_cast<unsigned>((warps * 32 + kThreads - 1) / kThreads);
  launch(quantize_kernel, blocks, kThreads, 0, s, w, n, k, group, groups, values, scales);
}

void dequantize_int8(const Int8Weights& w, int64_t n, int64_t k, uint16_t* out, cudaStream_t s) {
  const int64_t vecs = n * (k / 16);
  const auto blocks = static_cast<unsigned>((vecs + kThreads - 1) / kThreads);
  launch(dequantize_kernel, blocks, kThreads, 0, s, w, n, k, out);
}

}  // namespace photon::cuda
