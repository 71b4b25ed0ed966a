// Error checking for CUDA runtime and cuBLASLt calls: a failure becomes a Status naming the call, file and line.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <fmt/format.h>
#include <photon/status.hpp>

namespace photon::cuda {

inline Status cuda_status(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return Status::ok();
  const StatusCode code = err == cudaErrorMemoryAllocation ? StatusCode::kOutOfMemory : StatusCode::kInternal;
  return Status(code, fmt::format("{} failed: {} ({}:{})", what, cudaGetErrorString(err), file, line));
}

inline Status cublas_status(cublasStatus_t err, const char* what, const char* file, int line) {
  if (err == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return Status(StatusCode::kInternal,
                fmt::format("{} failed: cuBLAS status {} ({}:{})", what, static_cast<int>(err), file, line));
}

}  // namespace photon::cuda

/// Returns a Status from the enclosing function when the CUDA call fails.
#define PHOTON_CUDA_RETURN_IF_ERROR(call) \
  PHOTON_RETURN_IF_ERROR(::photon::cuda::cuda_status((call), #call, __FILE__, __LINE__))
#define PHOTON_CUBLAS_RETURN_IF_ERROR(call) \
  PHOTON_RETURN_IF_ERROR(::photon::cuda::cublas_status((call), #call, __FILE__, __LINE__))
