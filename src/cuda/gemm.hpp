// Tensor-core matmuls through cuBLASLt, for prompts and batches too large for the GEMV kernels: out = x . w^T with
// bf16 inputs and f32 accumulation. One plan (descriptors plus the heuristic's algorithms) per shape, made on first
// use and cached.
//
// Which algorithm: cuBLASLt's heuristic ranks its algorithms, and its first is within 0-12% of the fastest on the
// engine's shapes (docs/performance.md, 2026-12-03 and 2026-12-06), so the algorithms are timed and the fastest kept
// per weight shape and bucket of row counts: the decode sizes (kDecodeRows) when the weight is prepared at load
// (time_decode_rows, weights coming from memory as in a decode step), larger buckets (powers of two) on their first
// call outside a CUDA graph capture, on that call's own operands. A timed algorithm replaces the heuristic's first
// only where it is at least 3% faster. The choice then depends on timings: two processes may pick differently and
// their sums differ in the last bits. PHOTON_GEMM_TUNING=0 turns every timed choice off (this one and the int8 paths',
// w8a16_choices.hpp): the heuristic's first, the same in every process.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <photon/status.hpp>

#include "cuda/launch_timer.hpp"

namespace photon::cuda {

/// False where PHOTON_GEMM_TUNING=0 (read once): matmul paths and algorithms are then never timed.
bool gemm_tuning_enabled();

class Gemm {
 public:
  /// Device workspace the caller provides to init(), in bytes.
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  /// run()'s default: the timed algorithm for the shape's row bucket where there is one, else the heuristic's first.
  static constexpr int kChosen = -1;
  static constexpr int kMaxAlgorithms = 16;
  /// Row buckets timed at load: the decode graph sizes that reach cuBLASLt. m rows fall in the smallest bucket
  /// >= m; above the last, in the next power of two.
  static constexpr std::array<int, 13> kDecodeRows = {16, 24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256};

  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// Creates the cuBLASLt handle on the current device. `workspace`: kWorkspaceBytes of device memory, borrowed for
  /// this object's lifetime.
  Status init(void* workspace);
  /// out[m, n] = sum_k x[m, k] * w[n, k]: x bf16 [m, k] with rows ldx apart, w bf16 [n, k] contiguous, out [m, n] f32
  /// (out_f32) or bf16. Enqueued on `stream`. `rank`: kChosen, or the heuristic's rank-th algorithm (for benchmarks
  /// and tests that run them all; rank < algorithm_count(), else an error). With kChosen, the first call of an
  /// untimed bucket above kDecodeRows outside a graph capture times the algorithms on these operands first (waiting
  /// for the stream; `out` is written several times). Errors: no algorithm for the shape, cuBLASLt and CUDA failures.
  Status run(const void* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, void* out, bool out_f32,
             cudaStream_t stream, int rank = kChosen);
  /// How many algorithms cuBLASLt's heuristic offers for run()'s shape (1 to kMaxAlgorithms, best guess first).
  /// Errors as run().
  Result<int> algorithm_count(int64_t m, int64_t k, int64_t ldx, int64_t n, bool out_f32);

  /// Bytes of device scratch time_decode_rows() needs for a weight of n x k.
  static size_t decode_scratch_bytes(int64_t n, int64_t k, bool out_f32);
  /// Whether time_decode_rows() would time this weight shape: tuning is on and the shape was not timed yet.
  bool wants_decode_rows(int64_t n, int64_t k, bool out_f32) const;
  /// Times the heuristic's algorithms for the weight `w` (bf16 [n, k], contiguous activations) at every row count
  /// of kDecodeRows, each launch after an L2 flush, and keeps each bucket's fastest. `scratch`:
  /// decode_scratch_bytes() of device memory. Runs on `s` and waits for it. Errors: cuBLASLt and CUDA failures (the
  /// buckets timed before the failure keep their choices).
  Status time_decode_rows(const void* w, int64_t n, int64_t k, bool out_f32, void* scratch, cudaStream_t s);
  /// The timed buckets of a weight shape, for logs: "16: 2 of 8, 24: 0 of 8, ..." (the kept algorithm's heuristic
  /// rank, of how many were timed); empty if none.
  std::string describe(int64_t n, int64_t k, bool out_f32) const;

 private:
  struct Plan;
  /// A bucket's timing: the kept algorithm (the heuristic's first where none was 3% faster), and for describe().
  struct Choice {
    cublasLtMatmulAlgo_t algo{};
    int rank = 0, timed = 0;
    float first_us = 0, best_us = 0;  // the heuristic's first and the kept algorithm, microseconds a launch
  };
  using ShapeKey = std::tuple<int64_t, int64_t, bool>;  // n, k, out_f32
  static int64_t bucket(int64_t m);
  /// The shape's plan, made on first use, holding at least min(algorithms, what the heuristic offers) algorithms.
  Result<Plan*> plan(int64_t m, int64_t k, int64_t ldx, int64_t n, bool out_f32, int algorithms);
  Status launch(Plan& p, const cublasLtMatmulAlgo_t& algo, const void* x, const void* w, void* out,
                cudaStream_t stream);
  /// Times every algorithm of m's plan on these operands (after an L2 flush into `flush` where not null) and records
  /// the bucket's choice.
  Result<Choice> time_bucket(const void* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, void* out,
                             bool out_f32, void* flush, cudaStream_t stream);
  /// The algorithm kChosen runs for plan p of m rows: the bucket's choice where cuBLASLt accepts it for p's shape.
  const cublasLtMatmulAlgo_t& chosen(Plan& p, int64_t m, int64_t n, int64_t k, bool out_f32);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>, std::unique_ptr<Plan>> plans_;
  std::map<ShapeKey, std::map<int64_t, Choice>> choices_;  // by weight shape, then bucket
  LaunchTimer timer_;
};

}  // namespace photon::cuda
