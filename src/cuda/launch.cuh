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

#include <cstdint>
#include <utility>

#include "cuda/kernel_trace.hpp"

namespace photon::cuda {

/// Streaming multiprocessors of the current device (read once per process; 132, an H100's, if the query fails).
/// Grid sizes are chosen in multiples of it.
inline int sm_count() {
  static const int count = [] {
    int device = 0, n = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    return n > 0 ? n : 132;
  }();
  return count;
}

#ifdef PHOTON_KERNEL_TRACE
namespace {  // each CUDA source has its own copy of the pointer, set through its binder (kernel_trace.hpp)
__device__ trace::Slot* trace_slots = nullptr;
void bind_trace(trace::Slot* slots) { cudaMemcpyToSymbol(trace_slots, &slots, sizeof(slots)); }
[[maybe_unused]] const bool trace_bound = (trace::register_binder(&bind_trace), true);
}  // namespace

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#endif

__device__ __forceinline__ void pdl_begin() {
#ifdef PHOTON_KERNEL_TRACE
  // The slots pointer is read before the wait, so that recording adds no load to the chain after it.
  trace::Slot* const slots = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0 ? trace_slots : nullptr;
  const uint64_t arrive = global_ns();
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
#ifdef PHOTON_KERNEL_TRACE
  const uint64_t release = global_ns();
  if (slots != nullptr) {
    const uint64_t blocks = static_cast<uint64_t>(gridDim.x) * gridDim.y * gridDim.z;
    const uint64_t block =
        blockIdx.x + static_cast<uint64_t>(gridDim.x) * (blockIdx.y + static_cast<uint64_t>(gridDim.y) * blockIdx.z);
    if (block < trace::kBlocks - 1 || block == blocks - 1) {
      uint64_t grid;
      unsigned sm;
      asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      const uint64_t slot =
          (grid % trace::kGrids) * trace::kBlocks + min(block, static_cast<uint64_t>(trace::kBlocks - 1));
      slots[slot] = {grid, arrive, release,
                     block | static_cast<uint64_t>(sm & 0xff) << 20 |
                         static_cast<uint64_t>(blockDim.x * blockDim.y * blockDim.z) << 28 | blocks << 39};
    }
  }
#endif
}

/// Whether the current device launches thread block clusters (compute capability 9.0 and later; read once).
inline bool has_clusters() {
  static const bool clusters = [] {
    int device = 0, major = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    return major >= 9;
  }();
  return clusters;
}

/// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialisation allowed, in thread block
/// clusters of `cluster` blocks when that is not 1 x 1 x 1 (the grid a multiple of it; only where has_clusters()).
/// Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t launch_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                            dim3 cluster, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = cluster.x;
  attributes[1].val.clusterDim.y = cluster.y;
  attributes[1].val.clusterDim.z = cluster.z;
  config.attrs = attributes;
  config.numAttrs = cluster.x * cluster.y * cluster.z > 1 ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

/// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialisation allowed.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  launch_clusters(kernel, grid, block, smem, stream, dim3(1, 1, 1), std::forward<Args>(args)...);
}

}  // namespace photon::cuda
