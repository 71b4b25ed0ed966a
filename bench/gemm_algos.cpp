// How much speed cuBLASLt's first heuristic choice leaves on the table for the engine's bf16 matmuls
// (out[m, n] = x[m, k] . w[n, k]^T, f32 accumulation, bf16 out, as cuda::Gemm runs them): for each projection shape
// of the models photon bench runs and each row count M, every algorithm the heuristic offers (up to 16) is timed in
// a CUDA graph, weights cycled through >= 512 MiB so none stays in L2. Prints one JSON line per shape and M:
// {"model", "matrix", "m", "n", "k", "algos", "first_us", "best_us", "best_index", "tflops_best"}
// where first_us is the heuristic's first algorithm (what an untuned plan runs) and best_index the fastest one's rank.
// Usage: photon_gemm_algos [M ...] [--only TEXT]   (default M: 64 256 1024 4096; --only filters "model matrix")
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/gemm.hpp"
#include "graph_timing.hpp"
#include "projection_shapes.hpp"

namespace {

template <typename T>
T check(photon::Result<T> r) {
  if (!r.is_ok()) {
    std::fprintf(stderr, "%s\n", r.status().message().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

}  // namespace

int main(int argc, char** argv) {
  const photon::bench::RowsArgs args = photon::bench::parse_rows_args(argc, argv, {64, 256, 1024, 4096});
  const std::vector<int>& ms = args.rows;
  const std::string& only = args.only;
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, photon::cuda::Gemm::kWorkspaceBytes));
  photon::cuda::Gemm gemm;
  if (const photon::Status st = gemm.init(workspace); !st.is_ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  const int max_m = 8192, max_k = 16384;
  void* x = nullptr;
  void* out = nullptr;
  CHECK_CUDA(cudaMalloc(&x, size_t{2} * max_m * max_k));
  CHECK_CUDA(cudaMemset(x, 0x3c, size_t{2} * max_m * max_k));
  for (const photon::bench::ProjectionShape& s : photon::bench::kProjectionShapes) {
    const std::string label = std::string(s.model) + " " + s.matrix;
    if (label.find(only) == std::string::npos) continue;
    const size_t bytes = size_t{2} * s.n * s.k;
    const int copies = static_cast<int>((size_t{512} << 20) / bytes + 1);
    std::vector<void*> weights(static_cast<size_t>(copies));
    for (auto& w : weights) {
      CHECK_CUDA(cudaMalloc(&w, bytes));
      CHECK_CUDA(cudaMemset(w, 0x3c, bytes));
    }
    for (int m : ms) {
      if (m > max_m) continue;
      CHECK_CUDA(cudaMalloc(&out, size_t{2} * m * s.n));
      const int found = check(gemm.algorithm_count(m, s.k, s.k, s.n, false));
      double first_us = 0, best_us = 1e30;
      int best = -1;
      for (int i = 0; i < found; ++i) {
        constexpr int kLaunches = 16;
        bool failed = false;
        auto enqueue = [&] {
          for (int l = 0; l < kLaunches; ++l) {
            failed |=
                !gemm.run(x, m, s.k, s.k, weights[static_cast<size_t>(l % copies)], s.n, out, false, stream, i).is_ok();
          }
        };
        const double us = photon::bench::graph_us_per_launch(stream, kLaunches, enqueue, 10);
        if (failed) continue;
        if (i == 0) first_us = us;
        if (us < best_us) best_us = us, best = i;
      }
      std::printf(
          "{\"model\": \"%s\", \"matrix\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"algos\": %d, \"first_us\": "
          "%.2f, \"best_us\": %.2f, \"best_index\": %d, \"tflops_best\": %.1f}\n",
          s.model, s.matrix, m, s.n, s.k, found, first_us, best_us, best, 2.0 * m * s.n * s.k / best_us / 1e6);
      std::fflush(stdout);
      CHECK_CUDA(cudaFree(out));
    }
    for (void* w : weights) CHECK_CUDA(cudaFree(w));
  }
  return 0;
}
