// Kernel launches with programmatic dependent launch (PDL, Hopper and later): a kernel may start launching while
// the one before it on the stream is still running, so its launch latency and block scheduling hide behind that
// kernel's tail. Captured into CUDA graphs as programmatic edges. On GPUs before Hopper the attribute has no effect.
//
// Contract: every kernel launched through launch() calls pdl_begin() before it touches memory that a kernel of the
// same step writes. pdl_begin waits until the previous kernel has finished and its writes are visible (so results
// are exactly those of plain stream order), then allows the next kernel to begin launching. Before it a kernel may
// read only what no kernel writes: weights, and the step's inputs copied in before its first kernel (the batch
// description), so that those loads overlap the previous kernel's tail.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace photon::cuda {

__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialisation allowed.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace photon::cuda
