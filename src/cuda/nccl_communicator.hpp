// Tensor-parallel collectives between GPUs through NCCL, enqueued on each rank's CUDA backend stream (and so
// captured into its CUDA graphs like any kernel). NVLink SHARP (NVLS) is left to NCCL's environment settings.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/communicator.hpp"

namespace photon {

/// One group over GPUs driven by this process: communicator r belongs to backends[r] (each a CUDA backend on a
/// different GPU). Errors: no NCCL in this build, a non-CUDA backend, NCCL's own failures.
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(std::span<Backend* const> backends);

/// Multi-process groups (one process per GPU, on one or several hosts), with NCCL's standard bootstrap: rank 0
/// creates an id, the launcher hands it to every process (environment, file, MPI broadcast), and each process joins
/// with its rank. Blocks until all `size` ranks have joined.
Result<std::string> make_nccl_unique_id();  ///< printable (hex) form of ncclUniqueId
Result<std::unique_ptr<Communicator>> join_nccl_group(Backend& backend, const std::string& unique_id, int rank,
                                                       int size);

}  // namespace photon
