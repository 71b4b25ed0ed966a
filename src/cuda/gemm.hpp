// Tensor-core matmuls through cuBLASLt, for prompts and batches too large for the GEMV kernels: out = x . w^T with
// bf16 inputs and f32 accumulation. One plan (descriptors plus the heuristic's algorithm) per shape, made on first
// use and cached. Not thread-safe: one per backend, used on its stream.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include <photon/status.hpp>

namespace photon::cuda {

class Gemm {
 public:
  /// Device workspace the caller provides to init(), in bytes.
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// Creates the cuBLASLt handle on the current device. `workspace`: kWorkspaceBytes of device memory, borrowed for
  /// this object's lifetime.
  Status init(void* workspace);
  /// out[m, n] = sum_k x[m, k] * w[n, k]: x bf16 [m, k] with rows ldx apart, w bf16 [n, k] contiguous, out [m, n] f32
  /// (out_f32) or bf16. Enqueued on `stream`. Errors: no algorithm for the shape, cuBLASLt failures.
  /// With `rank` > 0, the heuristic's rank-th algorithm for the shape instead of its first (for benchmarks that time
  /// them all; rank < algorithm_count(), else an error).
  Status run(const void* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, void* out, bool out_f32,
             cudaStream_t stream, int rank = 0);
  /// How many algorithms cuBLASLt's heuristic offers for run()'s shape (1 to kMaxAlgorithms, best guess first).
  /// Errors as run().
  Result<int> algorithm_count(int64_t m, int64_t k, int64_t ldx, int64_t n, bool out_f32);
  static constexpr int kMaxAlgorithms = 16;

 private:
  struct Plan;
  /// The shape's plan, made on first use, holding at least min(algorithms, what the heuristic offers) algorithms.
  Result<Plan*> plan(int64_t m, int64_t k, int64_t ldx, int64_t n, bool out_f32, int algorithms);
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>, std::unique_ptr<Plan>> plans_;
};

}  // namespace photon::cuda
