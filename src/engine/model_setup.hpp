// The model side of an engine on this process: the backends and communicators of the tensor-parallel ranks it
// hosts, their weights, decoders and KV caches, sized from the EngineConfig. Engine::create builds it for rank 0
// (and, in one process, for every rank); run_tensor_parallel_worker builds it for one rank of a multi-process group.
#pragma once

#include <memory>
#include <vector>

#include <photon/engine.hpp>

#include "core/communicator.hpp"
#include "core/process_group.hpp"
#include "engine/model_runner.hpp"
#include "models/model_config.hpp"
#include "models/model_loader.hpp"

namespace photon {

/// Members are declared in the order they must outlive each other: the group outlives the communicators, which
/// outlive the decoders of `ranks` (moved into a ModelRunner, which must be destroyed first).
struct LocalModel {
  std::unique_ptr<ProcessGroup> group;             ///< multi-process groups only
  std::vector<std::unique_ptr<Backend>> backends;  ///< one per rank hosted here
  std::vector<std::unique_ptr<Communicator>> communicators;
  std::vector<ModelRank> ranks;
  uint64_t weight_bytes = 0;  ///< over every rank of the group (those hosted here, and in a multi-process group all)
  DecoderLimits limits;       ///< limits.max_seq_len is the engine's max_model_len
  int64_t num_blocks = 0;     ///< KV blocks per rank, the same on every rank of the group
};

/// Validates the sizes in `config` against `mc` and builds this process's ranks: every rank when
/// config.dist_init_addr is empty, else rank config.rank only, after joining the group at that address (the KV
/// block count is agreed with the other processes: the smallest any rank can hold). Errors name the rank.
Result<LocalModel> build_local_model(const EngineConfig& config, const ModelSource& source, const ModelConfig& mc);

/// The ModelSource of `config` (model, load format, dummy dtype and seed), validated.
Result<ModelSource> model_source(const EngineConfig& config);

}  // namespace photon
