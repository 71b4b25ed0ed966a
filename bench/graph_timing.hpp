// Shared by the GPU kernel benchmarks: a CUDA-error check that exits, and the time of a sequence of launches
// replayed as a CUDA graph (as the engine's decode steps run them).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                 \
  do {                                                                   \
    const cudaError_t err_ = (call);                                     \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

namespace photon::bench {

/// Captures enqueue() (which issues `launches` kernel launches on `stream`) into a graph, replays it once to warm up,
/// then `replays` times under CUDA events; returns the mean microseconds per launch. Exits on a CUDA error.
template <typename Enqueue>
double graph_us_per_launch(cudaStream_t stream, int launches, Enqueue&& enqueue, int replays = 5) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphLaunch(exec, stream));  // warm-up
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventRecord(start, stream));
  for (int r = 0; r < replays; ++r) CHECK_CUDA(cudaGraphLaunch(exec, stream));
  CHECK_CUDA(cudaEventRecord(stop, stream));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms_total = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms_total, start, stop));
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return 1e3 * ms_total / (static_cast<double>(replays) * launches);
}

}  // namespace photon::bench
