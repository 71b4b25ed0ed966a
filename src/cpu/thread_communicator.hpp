// Collectives between ranks that are threads of one process sharing host memory: the CPU backend's tensor
// parallelism (used to run and test the sharded decoder without GPUs).
#pragma once

#include <memory>
#include <vector>

#include "core/communicator.hpp"

namespace photon {

/// `size` communicators of one group; rank r's must be used by one thread, and all of them concurrently (each
/// collective waits until every rank has reached it). f32 tensors only (the CPU backend's activations).
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int size);

}  // namespace photon
