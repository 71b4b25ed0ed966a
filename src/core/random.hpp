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

/// A uniform float in (0, 1) for the key (seed, index, lane): 24 random bits, never 0 or 1.
PHOTON_HOST_DEVICE inline float uniform01(uint64_t seed, uint64_t index, uint32_t lane) {
  const uint64_t h = mix64(mix64(seed ^ mix64(index)) + lane);
  return (static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

/// A standard Gumbel variate for the key: argmax_i(logit_i / T + gumbel(seed, step, i)) is an exact draw from
/// softmax(logits / T) (the Gumbel-max trick), which needs no sort and no normalisation.
PHOTON_HOST_DEVICE inline float gumbel(uint64_t seed, uint64_t index, uint32_t lane) {
  return -logf(-logf(uniform01(seed, index, lane)));
}

}  // namespace photon
