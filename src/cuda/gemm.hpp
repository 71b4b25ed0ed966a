// Tensor-core matmuls through cuBLASLt, for prompts and batches too large for the GEMV kernels: out = x . w^T with
// bf16 inputs and f32 accumulation. One plan (descriptors plus the heuristic's algorithms) per shape, made on first
// use and cached.
//
// Which algorithm: cuBLASLt's heuristic ranks its algorithms, and on prompt-sized products its first took up to 1.9x
// the time of the fastest it offers (docs/performance.md, 2026-12-06, evening), so for more than kHeuristicRows rows
// the algorithms are timed and the fastest kept per weight shape and bucket of row counts (powers of two from 512):
// when the weight is prepared, for the buckets up to the engine's token budget (time_prompt_rows), and on the first
// call of a bucket still untimed, outside a CUDA graph capture, on that call's own operands. A timed algorithm
// replaces the heuristic's first only where it is at least 3% faster. Decode-sized products keep the heuristic's
// first: timed choices there measured no faster end to end. The choice depends on timings: two processes may pick
// differently and their sums differ in the last bits. PHOTON_GEMM_TUNING=0 turns every timed choice off (this one
// and the int8 paths', w8a16_choices.hpp): the heuristic's first, the same in every process.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

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
  /// Up to this many rows the heuristic's first algorithm serves, untimed.
  static constexpr int64_t kHeuristicRows = 256;
  /// time_prompt_rows() times buckets up to this many rows; larger ones are timed on first use.
  static constexpr int64_t kMaxPreparedRows = 16384;

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
  /// untimed bucket above kHeuristicRows outside a graph capture times the algorithms on these operands first
  /// (waiting for the stream; `out` is written several times). Errors: no algorithm for the shape, cuBLASLt and CUDA
  /// failures.
  Status run(const void* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, void* out, bool out_f32,
             cudaStream_t stream, int rank = kChosen);
  /// How many algorithms cuBLASLt's heuristic offers for run()'s shape (1 to kMaxAlgorithms, best guess first).
  /// Errors as run().
  Result<int> algorithm_count(int64_t m, int64_t k, int64_t ldx, int64_t n, bool out_f32);

  /// Bytes of device scratch time_prompt_rows() needs for a weight of n x k and products of up to max_rows rows.
  static size_t prompt_scratch_bytes(int64_t n, int64_t k, bool out_f32, int64_t max_rows);
  /// Whether time_prompt_rows() would time anything for this weight shape: tuning is on, max_rows exceeds
  /// kHeuristicRows and a bucket up to it is untimed.
  bool wants_prompt_rows(int64_t n, int64_t k, bool out_f32, int64_t max_rows) const;
  /// Times the heuristic's algorithms for the weight `w` (bf16 [n, k]; contiguous activations) in each untimed
  /// bucket above kHeuristicRows up to max_rows (at most kMaxPreparedRows), at the bucket's size or max_rows where
  /// that is less, and keeps each bucket's fastest. `scratch`: prompt_scratch_bytes() of device memory. Runs on `s`
  /// and waits for it. Errors: cuBLASLt and CUDA failures (the buckets timed before keep their choices).
  Status time_prompt_rows(const void* w, int64_t n, int64_t k, bool out_f32, int64_t max_rows, void* scratch,
                          cudaStream_t s);
  /// The timed buckets of a weight shape, for logs: "512: rank 2 of 8, 10.1 us (first 12.3), ..." (the kept
  /// algorithm's heuristic rank of how many were timed, its time and the heuristic's first's); empty if none.
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
  /// The buckets above kHeuristicRows up to products of max_rows rows (at most kMaxPreparedRows) that this weight
  /// shape has no choice for yet, smallest first; none when tuning is off.
  std::vector<int64_t> untimed_prompt_buckets(int64_t n, int64_t k, bool out_f32, int64_t max_rows) const;
  /// Times every algorithm of m's plan on these operands and records the bucket's choice.
  Result<Choice> time_bucket(const void* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, void* out,
                             bool out_f32, cudaStream_t stream);
  /// The algorithm kChosen runs for plan p of m rows: the bucket's choice where cuBLASLt accepts it for p's shape.
  const cublasLtMatmulAlgo_t& chosen(Plan& p, int64_t m, int64_t n, int64_t k, bool out_f32);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>, std::unique_ptr<Plan>> plans_;
  std::map<ShapeKey, std::map<int64_t, Choice>> choices_;  // by weight shape, then bucket
  LaunchTimer timer_;
};

}  // namespace photon::cuda
