// The CUDA implementation of the Backend interface: bf16 weights and activations with f32 accumulation, GEMMs
// through cuBLASLt, the remaining operations as kernels in src/cuda/*.cu, all on one stream.
#pragma once

#include <memory>

#include "core/backend.hpp"

namespace photon {

/// A backend on GPU `device`. Device memory comes from its own allocator, capped at `memory_limit_bytes`.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device, size_t memory_limit_bytes = ~size_t{0});

/// The cudaStream_t every operation of a backend from make_cuda_backend runs on; nullptr for other backends.
void* cuda_backend_stream(Backend& backend);

}  // namespace photon
