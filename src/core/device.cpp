#include "core/device.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

#include <fmt/format.h>

namespace photon {

std::string Device::to_string() const {
  return kind == DeviceKind::kCpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Status MemoryBudget::reserve(size_t bytes, std::string_view what) {
  const size_t now = in_use_.fetch_add(bytes) + bytes;
  if (now > limit_.load()) {
    in_use_.fetch_sub(bytes);
    return Status(StatusCode::kOutOfMemory,
                  fmt::format("{} allocation of {} bytes exceeds the memory limit of {} bytes ({} in use); lower the "
                              "KV cache or batch sizes, or raise the limit",
                              what, bytes, limit_.load(), now - bytes));
  }
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return Status::ok();
}

Result<void*> CpuAllocator::allocate(size_t bytes) {
  PHOTON_RETURN_IF_ERROR(budget_.reserve(bytes, "host"));
  void* p = nullptr;
  if (bytes >= kHugePage) {
    // Weights and KV caches: 2 MiB-aligned and backed by transparent huge pages where the kernel allows them, so
    // that first touching a model's gigabytes costs a fault per 2 MiB instead of per 4 KiB (most of the time of
    // making a dummy model), and streaming them misses the TLB far less.
    if (posix_memalign(&p, kHugePage, bytes) != 0) p = nullptr;
    if (p != nullptr) madvise(p, (bytes + 4095) / 4096 * 4096, MADV_HUGEPAGE);  // advisory: errors are harmless
  } else {
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  }
  if (p == nullptr) {
    budget_.release(bytes);
    return Status(StatusCode::kOutOfMemory,
                  fmt::format("host allocation of {} bytes failed; free memory or lower the KV cache size", bytes));
  }
  return p;
}

void CpuAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  budget_.release(bytes);
}

CpuAllocator& default_cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

}  // namespace photon
