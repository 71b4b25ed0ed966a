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
/// different GPU). With `peer_all_reduce`, small all-reduces take a one-shot kernel over peer access where every pair
/// of GPUs has it (EngineConfig::peer_all_reduce). Errors: a non-CUDA backend, NCCL's own failures.
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(std::span<Backend* const> backends,
                                                                           bool peer_all_reduce);

class ProcessGroup;
/// This process's rank of a multi-process group (one GPU per process, possibly on several hosts): rank 0 creates
/// NCCL's unique id and `group` hands it to the others, then every rank joins with ncclCommInitRank. Collective:
/// every rank of `group` calls it.
Result<std::unique_ptr<Communicator>> make_nccl_communicator(Backend& backend, ProcessGroup& group);

}  // namespace photon
