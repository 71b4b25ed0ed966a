// Times single launches on a stream, for the choices the CUDA backend makes by measurement (cuBLASLt's algorithm
// per shape, the int8 matmul path per shape): each launch alone between two CUDA events, optionally right after a
// write that evicts the L2 cache (so that weights come from memory, as in a decode step), the least of three kept.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

#include <photon/status.hpp>

namespace photon::cuda {

class LaunchTimer {
 public:
  LaunchTimer() = default;
  ~LaunchTimer();
  LaunchTimer(const LaunchTimer&) = delete;
  LaunchTimer& operator=(const LaunchTimer&) = delete;

  /// Bytes of device memory a flush buffer needs to evict this GPU's L2 cache: twice its size, at least 64 MiB.
  static size_t flush_bytes();
  /// Creates the events on the current device. Errors: CUDA failures.
  Status init();
  /// Runs `enqueue` once untimed (it loads kernels and makes plans), then three times, each after a write of
  /// flush_bytes() to `flush` where that is not null; returns the least of the three in microseconds. `enqueue` puts
  /// one launch on `s` and returns true, or false having launched nothing (the path does not serve the shape): then
  /// -1, nothing timed. Waits for `s`. Not thread-safe. Errors: enqueue's, CUDA failures.
  Result<float> least_us(cudaStream_t s, void* flush, const std::function<Result<bool>()>& enqueue);

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace photon::cuda
