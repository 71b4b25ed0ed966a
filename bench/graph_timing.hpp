// Shared by the GPU kernel benchmarks: a CUDA-error check that exits, their command line, and the time of a sequence
// of launches replayed as a CUDA graph (as the engine's decode steps run them).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CHECK_CUDA(call)                                                 \
  do {                                                                   \
    const cudaError_t err_ = (call);                                     \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

namespace photon::bench {

/// A kernel benchmark's command line: row counts (positive integers) and `--only TEXT` (keep the shapes whose label
/// contains TEXT). Exits with a message on anything else; `defaults` when no row count is given.
struct RowsArgs {
  std::vector<int> rows;
  std::string only;
};
inline RowsArgs parse_rows_args(int argc, char** argv, std::vector<int> defaults) {
  RowsArgs a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--only" && i + 1 < argc) {
      a.only = argv[++i];
      continue;
    }
    char* end = nullptr;
    const long v = std::strtol(arg.c_str(), &end, 10);
    if (arg.empty() || *end != '\0' || v < 1 || v > 1 << 20) {
      std::fprintf(stderr, "'%s': expected a row count (a positive integer) or --only TEXT\n", arg.c_str());
      std::exit(2);
    }
    a.rows.push_back(static_cast<int>(v));
  }
  if (a.rows.empty()) a.rows = std::move(defaults);
  return a;
}

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
