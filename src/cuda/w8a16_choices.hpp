// Which int8 matmul path serves a batch of 17 to 256 activation rows fastest on this GPU: the Hopper W8A16 GEMM with
// one of its plans (token tile x K splits), or widening the weights to bf16 for cuBLASLt. A measured rule
// (w8a16_gemm_pays, then w8a16_gemm_plan) answers for every shape; the fastest path differs by matrix shape, row
// count and GPU more than a rule can follow (up to 30% of a layer's projection time at 128 rows, docs/performance.md,
// 2026-12-06), so each int8 weight shape is timed once, when its first weight is prepared, and the fastest path is
// kept for it. PHOTON_GEMM_TUNING=0 keeps the rule's choices (the same paths in every process; gemm.hpp).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include <photon/status.hpp>

#include "cuda/gemm.hpp"
#include "cuda/kernels.hpp"
#include "cuda/launch_timer.hpp"

namespace photon::cuda {

/// A path for an int8 matmul of more rows than the decode kernels take.
struct W8a16Choice {
  bool widen = false;  ///< widen the weights to bf16, then cuBLASLt; else w8a16_gemm with `plan`
  W8a16GemmPlan plan;  ///< for the W8A16 GEMM
};

/// The choices for the int8 weight shapes of one GPU. Not thread-safe: one per backend, used on its stream.
class W8a16Choices {
 public:
  /// Row counts that are timed: the engine's decode graph sizes from 17 to 256 rows. A batch of m rows takes the
  /// choice of the smallest of them >= m.
  static constexpr std::array<int, 12> kRows = {24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256};
  /// Bytes of scratch `time_shape` needs for a weight of n x k: activations and outputs of kRows.back() rows, and
  /// LaunchTimer::flush_bytes().
  static size_t scratch_bytes(int64_t n, int64_t k);

  /// Whether a weight of n x k with `group` is worth timing: the W8A16 GEMM runs here and takes the shape, and the
  /// shape was not timed yet (nor is timing turned off).
  bool wants(int64_t n, int64_t k, int group) const;
  /// Times every path at each of kRows for the weight `w` of n x k: each launch after a write that evicts the L2
  /// cache (so the weights come from memory, as in a decode step), the least of three launches kept; a path replaces
  /// the rule's only where it is at least 3% faster, so that near ties keep the rule's paths.
  /// `wide`: the widening path's bf16 scratch (>= n * k); `scratch`: scratch_bytes(n, k) of device memory. Runs on
  /// `s` and waits for it. Errors: CUDA failures (the shape then keeps the rule's paths).
  Status time_shape(const Int8Weights& w, int n, int k, Gemm& gemm, uint16_t* wide, void* scratch, cudaStream_t s);
  /// The path for m rows of a weight of n x k with `group`: the timed choice, else the rule's.
  W8a16Choice choose(int64_t m, int64_t n, int64_t k, int group) const;
  /// The timed paths of a shape, for logs: "24: 64/1, ..., 256: widen" (token tile / splits); empty if untimed.
  std::string describe(int64_t n, int64_t k, int group) const;

 private:
  std::map<std::tuple<int64_t, int64_t, int>, std::array<W8a16Choice, kRows.size()>> timed_;
};

}  // namespace photon::cuda
