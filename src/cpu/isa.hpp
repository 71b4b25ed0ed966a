// The vector instruction sets the CPU kernels have paths for, and which one runs. The path is chosen at run time from
// CPUID, so one binary runs on every x86-64 CPU; PHOTON_CPU_ISA (portable, avx2, avx512 or amx), read once, caps it so
// that a lower path can be tried on a machine that has a higher one, and tests cap it to run every path.
#pragma once

#include <optional>
#include <string_view>

namespace photon::cpu {

/// Kernel paths, lowest first: portable C++ (any CPU), AVX2 with FMA and F16C, AVX-512 (F, BW, VL), and AVX-512 with
/// AMX bf16 tiles (Intel Xeons since Sapphire Rapids; used by prompt and batch matmuls of bf16 weights).
enum class Isa { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

/// The highest path the running CPU supports. AMX counts only when the kernel grants this process the tile state
/// (Linux 5.16 and later; the request is made here, once).
Isa detected_isa();
/// The path the kernels take: detected_isa(), capped by PHOTON_CPU_ISA (an unknown value is reported once through the
/// log, naming the accepted ones, and ignored) and by set_isa_cap. Thread-safe.
Isa active_isa();
/// Caps the path (above the detected one it has no effect); std::nullopt removes the cap. For tests; thread-safe,
/// takes effect for kernel calls that start after it.
void set_isa_cap(std::optional<Isa> cap);

/// "portable", "avx2", "avx512" or "amx".
std::string_view isa_name(Isa isa);
/// The path named by `name` (as isa_name spells it), or std::nullopt.
std::optional<Isa> parse_isa(std::string_view name);

}  // namespace photon::cpu
