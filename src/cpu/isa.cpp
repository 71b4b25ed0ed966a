#include "cpu/isa.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "core/logging.hpp"

namespace photon::cpu {
namespace {

// AMX-TILE and AMX-BF16 in CPUID, the tile state enabled by the OS in XCR0, and the kernel's permission for this
// process to use it (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, feature 18).
bool amx_usable() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) return false;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;
  if ((edx & kAmxBf16) == 0 || (edx & kAmxTile) == 0) return false;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  asm volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);  // XTILECFG, XTILEDATA
  if ((xcr0_lo & kTileState) != kTileState) return false;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return amx_usable() ? Isa::kAmx : Isa::kAvx512;
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
  if (value == nullptr || *value == '\0') return Isa::kAmx;
  if (const auto isa = parse_isa(value)) return *isa;
  log::warn("PHOTON_CPU_ISA={} is not a CPU kernel path (portable, avx2, avx512 or amx); ignored", value);
  return Isa::kAmx;
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
    case Isa::kAmx:
      return "amx";
  }
  return "portable";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (const Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (name == isa_name(isa)) return isa;
  }
  return std::nullopt;
}

}  // namespace photon::cpu
