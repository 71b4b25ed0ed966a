// Skinny matmul for decode (M <= 8 rows of activations): out[m, n] = sum_k x[m, k] * w[n, k], bf16 in, f32
// accumulation, bf16 or f32 out. Each warp owns one weight row at a time and streams it once with 16-byte loads
// (several in flight per lane), applying it to all M activation rows; a warp-shuffle sum finishes each output.
// At M = 1 this reads exactly the weight bytes, the decode floor; cuBLASLt spends several microseconds per call on
// such shapes.
#include "cuda/common.cuh"
#include "cuda/kernels.cuh"

namespace photon::cuda {
namespace {

constexpr int kWarps = 8;

__device__ __forceinline__ void fma8(float* acc, const uint4& w, const uint4& x) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    acc[0] += __uint_as_float(ws[e] << 16) * __uint_as_float(xs[e] << 16);
    acc[1] += __uint_as_float(ws[e] & 0xffff0000u) * __uint_as_float(xs[e] & 0xffff0000u);
  }
}

template <int M, bool kOutF32>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const uint16_t* x, int64_t ldx, const uint16_t* w, int n, int k, void* out) {
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int stride = gridDim.x * kWarps;
  const int vecs = k / 8;  // 16-byte vectors per row
  for (int row = warp; row < n; row += stride) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(row) * k);
    float acc[M][2];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m][0] = acc[m][1] = 0.0f;
    int v = lane;
    // Four loads in flight per lane before their first use.
    for (; v + 96 < vecs; v += 128) {
      const uint4 w0 = __ldg(wr + v), w1 = __ldg(wr + v + 32), w2 = __ldg(wr + v + 64), w3 = __ldg(wr + v + 96);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint4* xr = reinterpret_cast<const uint4*>(x + m * ldx);
        fma8(acc[m], w0, xr[v]);
        fma8(acc[m], w1, xr[v + 32]);
        fma8(acc[m], w2, xr[v + 64]);
        fma8(acc[m], w3, xr[v + 96]);
      }
    }
    for (; v < vecs; v += 32) {
      const uint4 w0 = __ldg(wr + v);
#pragma unroll
      for (int m = 0; m < M; ++m) fma8(acc[m], w0, reinterpret_cast<const uint4*>(x + m * ldx)[v]);
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float sum = warp_sum(acc[m][0] + acc[m][1]);
      if (lane == 0) {
        if constexpr (kOutF32) {
          static_cast<float*>(out)[static_cast<int64_t>(m) * n + row] = sum;
        } else {
          static_cast<uint16_t*>(out)[static_cast<int64_t>(m) * n + row] = f2bf(sum);
        }
      }
    }
  }
}

template <int M>
void launch(const uint16_t* x, int64_t ldx, const uint16_t* w, int n, int k, void* out, bool out_f32, cudaStream_t s) {
  // Enough warps to cover the rows, capped so that each SM holds several blocks and loops over the rest.
  const int blocks = min((n + kWarps - 1) / kWarps, 132 * 8);
  if (out_f32) {
    gemv_kernel<M, true><<<blocks, kWarps * 32, 0, s>>>(x, ldx, w, n, k, out);
  } else {
    gemv_kernel<M, false><<<blocks, kWarps * 32, 0, s>>>(x, ldx, w, n, k, out);
  }
}

}  // namespace

bool gemv_supported(int m, int k, int64_t ldx) { return m >= 1 && m <= 8 && k % 8 == 0 && ldx % 8 == 0; }

void gemv(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int n, int k, void* out, bool out_f32,
          cudaStream_t s) {
  switch (m) {
    case 1:
      return launch<1>(x, ldx, w, n, k, out, out_f32, s);
    case 2:
      return launch<2>(x, ldx, w, n, k, out, out_f32, s);
    case 3:
      return launch<3>(x, ldx, w, n, k, out, out_f32, s);
    case 4:
      return launch<4>(x, ldx, w, n, k, out, out_f32, s);
    case 5:
      return launch<5>(x, ldx, w, n, k, out, out_f32, s);
    case 6:
      return launch<6>(x, ldx, w, n, k, out, out_f32, s);
    case 7:
      return launch<7>(x, ldx, w, n, k, out, out_f32, s);
    default:
      return launch<8>(x, ldx, w, n, k, out, out_f32, s);
  }
}

}  // namespace photon::cuda
