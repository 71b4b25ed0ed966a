#include "core/device.hpp"

#include <cstdlib>
#include <new>

#include <fmt/format.h>

namespace photon {

std::string Device::to_string() const {
  return kind == DeviceKind::kCpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Result<void*> CpuAllocator::allocate(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  const size_t now = in_use_.fetch_add(bytes) + bytes;
  if (now > limit_.load()) {
    in_use_.fetch_sub(bytes);
    return Status(StatusCode::kOutOfMemory,
                  fmt::format("host allocation of {} bytes exceeds the memory limit of {} bytes ({} in use); lower "
                              "the model or KV cache size, or raise the limit",
                              bytes, limit_.load(), now - bytes));
  }
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (p == nullptr) {
    in_use_.fetch_sub(bytes);
    return Status(StatusCode::kOutOfMemory,
                  fmt::format("host allocation of {} bytes failed; free memory or lower the KV cache size", bytes));
  }
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void CpuAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  in_use_.fetch_sub(bytes);
}

CpuAllocator& default_cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

}  // namespace photon
