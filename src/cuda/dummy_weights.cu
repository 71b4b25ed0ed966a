// Dummy weights generated where they live: the host's formula (core/dummy_weights.hpp), one element per thread.
#include <algorithm>

#include "core/dummy_weights.hpp"
#include "cuda/common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"

namespace photon::cuda {
namespace {

__global__ void fill_kernel(DummyFill f, void* __restrict__ out, bool bf16) {
  pdl_begin();
  const int64_t n = f.rows * f.cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = dummy_value(f, i / f.cols, i % f.cols);
    if (bf16) {
      static_cast<uint16_t*>(out)[i] = f2bf(v);
    } else {
      static_cast<float*>(out)[i] = v;
    }
  }
}

}  // namespace

void fill_dummy(const DummyFill& f, void* out, bool bf16, cudaStream_t s) {
  const int64_t n = f.rows * f.cols;
  if (n <= 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535 * 8));
  launch(fill_kernel, blocks, 256, 0, s, f, out, bf16);
}

}  // namespace photon::cuda
