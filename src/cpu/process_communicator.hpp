// Collectives between CPU ranks that are separate processes (possibly on separate hosts), over the TCP connections
// of their ProcessGroup: rank 0 gathers every rank's tensor, reduces or concatenates in rank order, and sends the
// result back. The CPU backend's counterpart of NCCL for multi-process tensor parallelism; meant for correctness
// and small models (every collective is a round trip through rank 0).
#pragma once

#include <memory>

#include "core/communicator.hpp"
#include "core/process_group.hpp"

namespace photon {

/// This process's communicator in `group` (not owned; must outlive it). f32 contiguous tensors only. Sums are
/// taken in rank order, so results equal the in-process thread communicator's bit for bit.
std::unique_ptr<Communicator> make_process_communicator(ProcessGroup& group);

}  // namespace photon
