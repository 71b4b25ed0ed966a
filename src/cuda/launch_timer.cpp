#include "cuda/launch_timer.hpp"

#include <algorithm>

#include "cuda/cuda_check.hpp"

namespace photon::cuda {

LaunchTimer::~LaunchTimer() {
  if (stop_) cudaEventDestroy(stop_);
  if (start_) cudaEventDestroy(start_);
}

size_t LaunchTimer::flush_bytes() {
  static const size_t bytes = [] {
    int device = 0, l2 = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
    return std::max<size_t>(size_t{2} * static_cast<size_t>(l2), size_t{64} << 20);
  }();
  return bytes;
}

Status LaunchTimer::init() {
  if (start_ == nullptr) PHOTON_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_));
  if (stop_ == nullptr) PHOTON_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop_));
  return Status::ok();
}

Result<float> LaunchTimer::least_us(cudaStream_t s, void* flush, const std::function<Result<bool>()>& enqueue) {
  PHOTON_RETURN_IF_ERROR(init());
  PHOTON_ASSIGN_OR_RETURN(const bool runs, enqueue());
  if (!runs) return -1.0f;
  float best = 0.0f;
  for (int rep = 0; rep < 3; ++rep) {
    if (flush != nullptr) PHOTON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flush, rep, flush_bytes(), s));
    PHOTON_CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, s));
    PHOTON_ASSIGN_OR_RETURN(const bool again, enqueue());
    (void)again;
    PHOTON_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_, s));
    PHOTON_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop_));
    float ms = 0.0f;
    PHOTON_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_, stop_));
    best = rep == 0 ? ms * 1e3f : std::min(best, ms * 1e3f);
  }
  return best;
}

}  // namespace photon::cuda
