// Devices and the allocator interface every backend's memory comes from.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <string_view>

#include <photon/status.hpp>

namespace photon {

enum class DeviceKind : uint8_t { kCpu, kCuda };

/// Where a tensor's bytes live.
struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  ///< GPU ordinal for kCuda; 0 for the CPU

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceKind::kCuda, index}; }
  bool operator==(const Device&) const = default;
  /// "cpu" or "cuda:N".
  std::string to_string() const;
};

/// Source of device memory. Implementations are thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// At least `bytes` bytes, aligned to at least 64; an error (never nullptr with ok) when memory or the budget runs
  /// out.
  virtual Result<void*> allocate(size_t bytes) = 0;
  /// Returns memory from allocate(); `bytes` is the size that was asked for. nullptr is ignored.
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
  /// Bytes currently handed out, and the most ever handed out at once.
  virtual size_t bytes_in_use() const = 0;
  virtual size_t peak_bytes() const = 0;
};

/// Byte accounting against a limit, shared by the allocators: reserve before allocating, release after freeing.
/// Thread-safe.
class MemoryBudget {
 public:
  static constexpr size_t kNoLimit = ~size_t{0};
  explicit MemoryBudget(size_t limit_bytes = kNoLimit) : limit_(limit_bytes) {}
  /// Counts `bytes` as in use, or returns kOutOfMemory (naming `what` and the numbers) when that would pass the
  /// limit, counting nothing.
  Status reserve(size_t bytes, std::string_view what);
  void release(size_t bytes) { in_use_.fetch_sub(bytes); }
  size_t in_use() const { return in_use_.load(); }
  size_t peak() const { return peak_.load(); }
  void set_limit(size_t limit_bytes) { limit_.store(limit_bytes); }

 private:
  std::atomic<size_t> limit_;
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
};

/// Host memory, 64-byte aligned (one cache line, one AVX-512 register); 2 MiB-aligned with transparent huge pages
/// advised from 2 MiB up. An optional limit turns allocations past
/// it into kOutOfMemory errors: the memory budget on the CPU backend, and a fault-injection hook in tests.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  /// Allocations of at least this size are aligned to it and advised to use transparent huge pages.
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kNoLimit = ~size_t{0};

  explicit CpuAllocator(size_t limit_bytes = kNoLimit) : budget_(limit_bytes) {}
  Result<void*> allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cpu(); }
  size_t bytes_in_use() const override { return budget_.in_use(); }
  size_t peak_bytes() const override { return budget_.peak(); }
  void set_limit(size_t limit_bytes) { budget_.set_limit(limit_bytes); }

 private:
  MemoryBudget budget_;
};

/// The process-wide host allocator (no limit).
CpuAllocator& default_cpu_allocator();

}  // namespace photon
