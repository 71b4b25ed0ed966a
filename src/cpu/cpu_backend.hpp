// The CPU implementation of the Backend interface: f32 activations over f32/f16/bf16 weights.
#pragma once

#include <memory>

#include "core/backend.hpp"

namespace photon {

/// A CPU backend drawing memory from `allocator` (which must outlive it). Thread count follows OpenMP's
/// settings (OMP_NUM_THREADS); the backend itself is used from one thread at a time.
std::unique_ptr<Backend> make_cpu_backend(Allocator& allocator);

}  // namespace photon
