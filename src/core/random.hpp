// Counter-based random numbers shared by the host and the GPU: a value depends only on its (seed, index, lane)
// key, never on a generator's state, so a request's draws do not depend on what else is batched, on which backend
// or path samples it, or on preemption and recomputation.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PHOTON_HOST_DEVICE __host__ __device__
#else
#define PHOTON_HOST_DEVICE
#endif

namespace photon {

PHOTON_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The uniform float in (0, 1) of the low 23 bits of `bits`: (bits + 0.5) / 2^23. Every value is exact in a float
/// (24 significant bits), from 2^-24 to 1 - 2^-24: never 0 or 1. (With 24 bits the largest, 1 - 2^-25, rounds to 1,
/// whose Gumbel variate is infinite.)
PHOTON_HOST_DEVICE inline float uniform01_from_bits(uint32_t bits) {
  return (static_cast<float>(bits & 0x7fffffu) + 0.5f) * (1.0f / 8388608.0f);
}

/// A uniform float in (0, 1) for the key (seed, index, lane): 23 random bits, never 0 or 1.
PHOTON_HOST_DEVICE inline float uniform01(uint64_t seed, uint64_t index, uint32_t lane) {
  const uint64_t h = mix64(mix64(seed ^ mix64(index)) + lane);
  return uniform01_from_bits(static_cast<uint32_t>(h >> 41));
}

/// The standard Gumbel variate of a uniform u in (0, 1): -log(-log(u)).
PHOTON_HOST_DEVICE inline float gumbel_of(float u) { return -logf(-logf(u)); }

/// A standard Gumbel variate for the key: argmax_i(logit_i / T + gumbel(seed, step, i)) is an exact draw from
/// softmax(logits / T) (the Gumbel-max trick), which needs no sort and no normalisation.
PHOTON_HOST_DEVICE inline float gumbel(uint64_t seed, uint64_t index, uint32_t lane) {
  return gumbel_of(uniform01(seed, index, lane));
}

/// Above every value gumbel() gives, on the host and on a GPU: the largest is -log(-log(1 - 2^-24)) = 16.6355 (logf
/// is within an ulp or two of it). A token whose scaled logit plus this is below a value already drawn cannot win
/// the draw, so samplers skip its variate.
constexpr float kGumbelMax = 16.64f;

}  // namespace photon
