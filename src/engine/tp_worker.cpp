// The loop of a tensor-parallel rank other than 0 in a multi-process group: receive the step's batch from rank 0,
// run this rank's forward (its collectives meet rank 0's and the others'), repeat until told to stop.
#include <photon/engine.hpp>

#include <fmt/format.h>

#include "core/logging.hpp"
#include "engine/batch_message.hpp"
#include "engine/model_runner.hpp"
#include "engine/model_setup.hpp"
#include "models/model_loader.hpp"

namespace photon {

Status run_tensor_parallel_worker(const EngineConfig& config) {
  if (config.dist_init_addr.empty() || config.rank < 1 || config.rank >= config.tensor_parallel_size) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("a tensor-parallel worker needs dist_init_addr and a rank from 1 to {} (got rank {})",
                              config.tensor_parallel_size - 1, config.rank));
  }
  const std::string me = fmt::format("tensor-parallel rank {}", config.rank);
  PHOTON_ASSIGN_OR_RETURN(const ModelSource source, model_source(config));
  auto mc = load_config(source);
  if (!mc) return mc.status().with_context(me);
  auto local = build_local_model(config, source, *mc);
  if (!local) return local.status().with_context(me);
  ModelRank& rank = local->ranks[0];
  PHOTON_RETURN_IF_ERROR(rank.backend->make_current());
  log::info("{} ready: {:.2f} GB of weights, KV cache {} blocks", me, static_cast<double>(local->weight_bytes) / 1e9,
            local->num_blocks);
  std::vector<uint8_t> message;
  ForwardBatch batch;
  for (;;) {
    Status received = local->group->broadcast(message);
    if (!received.is_ok()) return received.with_context(fmt::format("{}: rank 0 went away", me));
    if (is_stop_message(message)) break;
    PHOTON_RETURN_IF_ERROR(deserialize_batch(message, batch).with_context(me));
    auto logits = rank.decoder->forward(batch, rank.kv_cache);
    if (!logits) return logits.status().with_context(me);
  }
  // Decoders release their CUDA graphs before the communicators they captured (NCCL waits for them).
  local->ranks.clear();
  return Status::ok();
}

}  // namespace photon
