// Device memory from cudaMalloc, with a byte budget and use/peak accounting. The engine takes all of its memory at
// start (weights, activations, KV cache), so steady-state steps never reach this allocator.
#pragma once

#include <string>

#include "core/device.hpp"

namespace photon::cuda {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device, size_t limit_bytes = MemoryBudget::kNoLimit)
      : device_(device), budget_(limit_bytes) {}
  Result<void*> allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cuda(device_); }
  size_t bytes_in_use() const override { return budget_.in_use(); }
  size_t peak_bytes() const override { return budget_.peak(); }
  void set_limit(size_t limit_bytes) { budget_.set_limit(limit_bytes); }

 private:
  int device_;
  MemoryBudget budget_;
};

/// Free and total bytes of device memory (cudaMemGetInfo).
Status device_memory(int device, size_t* free_bytes, size_t* total_bytes);
/// Number of CUDA devices usable by this process (0 when there is no driver or GPU).
int device_count();
/// Total bytes of memory and compute capability (major * 10 + minor) of `device`; zeros when it cannot be queried.
void device_properties(int device, uint64_t* total_bytes, int* compute_capability);
/// "NVIDIA H200 (sm_90, 139.8 GiB)".
std::string device_name(int device);

}  // namespace photon::cuda
