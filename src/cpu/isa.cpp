#include "cpu/isa.hpp"

#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "core/logging.hpp"

namespace photon::cpu {
namespace {

Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return Isa::kAvx512;
  }
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) {
    return Isa::kAvx2;
  }
  return Isa::kPortable;
}

// The cap from PHOTON_CPU_ISA, or the highest path when it is unset or unknown.
Isa environment_cap() {
  const char* value = std::getenv("PHOTON_CPU_ISA");
  if (value == nullptr || *value == '\0') return Isa::kAvx512;
  if (const auto isa = parse_isa(value)) return *isa;
  log::warn("PHOTON_CPU_ISA={} is not a CPU kernel path (portable, avx2 or avx512); ignored", value);
  return Isa::kAvx512;
}

constexpr int kNoCap = -1;
std::atomic<int> g_cap{kNoCap};

}  // namespace

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() {
  static const Isa from_environment = std::min(detected_isa(), environment_cap());
  const int cap = g_cap.load(std::memory_order_relaxed);
  return cap == kNoCap ? from_environment : std::min(from_environment, static_cast<Isa>(cap));
}

void set_isa_cap(std::optional<Isa> cap) { g_cap.store(cap ? static_cast<int>(*cap) : kNoCap); }

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "portable";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (const Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (name == isa_name(isa)) return isa;
  }
  return std::nullopt;
}

}  // namespace photon::cpu
