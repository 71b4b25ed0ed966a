#include "cuda/cuda_allocator.hpp"

#include <fmt/format.h>

#include "cuda/cuda_check.hpp"

namespace photon::cuda {

Result<void*> CudaAllocator::allocate(size_t bytes) {
  PHOTON_RETURN_IF_ERROR(budget_.reserve(bytes, "device"));
  void* p = nullptr;
  cudaError_t err = cudaSetDevice(device_);
  if (err == cudaSuccess) err = cudaMalloc(&p, bytes == 0 ? 256 : bytes);
  if (err != cudaSuccess) {
    budget_.release(bytes);
    (void)cudaGetLastError();  // clear the error state of a failed allocation
    return Status(StatusCode::kOutOfMemory,
                  fmt::format("cudaMalloc of {} bytes failed ({}); lower the KV cache or batch sizes", bytes,
                              cudaGetErrorString(err)));
  }
  return p;
}

void CudaAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  cudaFree(ptr);
  budget_.release(bytes);
}

Status device_memory(int device, size_t* free_bytes, size_t* total_bytes) {
  PHOTON_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  PHOTON_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(free_bytes, total_bytes));
  return Status::ok();
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

void device_properties(int device, uint64_t* total_bytes, int* compute_capability) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    *total_bytes = 0;
    *compute_capability = 0;
    return;
  }
  *total_bytes = prop.totalGlobalMem;
  *compute_capability = prop.major * 10 + prop.minor;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return fmt::format("cuda:{}", device);
  return fmt::format("{} (sm_{}{}, {:.1f} GiB)", prop.name, prop.major, prop.minor,
                     static_cast<double>(prop.totalGlobalMem) / (1 << 30));
}

}  // namespace photon::cuda
