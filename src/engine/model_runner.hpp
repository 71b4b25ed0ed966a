// ModelRunner: turns a SchedulerOutput into one forward pass of the decoder over the paged KV cache, on one device
// or on the ranks of a tensor-parallel group.
#pragma once

#include <memory>
#include <vector>

#include "core/process_group.hpp"
#include "engine/model_rank.hpp"
#include "engine/rank_threads.hpp"
#include "scheduler/scheduler.hpp"

namespace photon {

/// Fills `batch` with the ragged batch of `output`: each scheduled request's new tokens, positions, KV slots and
/// block table, and the logit rows it needs (every row of a prompt-logprobs chunk, else the last when sampling).
void build_forward_batch(const SchedulerOutput& output, int32_t block_size, ForwardBatch& batch);

/// Drives the ranks. With one rank, execute() is a plain call. With several (tensor parallelism), rank 0 runs on
/// the thread that calls execute() and every other rank on a thread of its own, which the runner owns: the
/// batch built by prepare() is shared with them in memory (the "broadcast" of a single process), all ranks run
/// forward() on it at once, and their collectives meet on the devices. In a multi-process group (`group` given:
/// this process is rank 0 and hosts only it), execute() first sends the batch to the other processes, whose
/// run_tensor_parallel_worker loops run the same forward; the destructor tells them to stop.
class ModelRunner {
 public:
  explicit ModelRunner(std::vector<ModelRank> ranks, ProcessGroup* group = nullptr);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  /// Builds the ragged batch for `output` (host arrays, reused between steps; no allocation once warm).
  const ForwardBatch& prepare(const SchedulerOutput& output);
  /// Runs the prepared batch on every rank; returns rank 0's logits [output.num_logits, vocab] on its device. The
  /// first error of any rank fails the step.
  Result<Tensor> execute();

  /// Where a step's sampled ids go so that the next step's batch can name them by placeholder
  /// (Decoder::sampled_ids); null with several ranks, which take no placeholders.
  Tensor* sampled_ids() {
    return ranks_.size() == 1 && group_ == nullptr ? &ranks_[0].decoder->sampled_ids() : nullptr;
  }
  /// Rank 0's decoder and cache (block geometry is the same on every rank).
  const Decoder& decoder() const { return *ranks_[0].decoder; }
  const PagedKvCache& kv_cache() const { return ranks_[0].kv_cache; }
  /// Bytes of KV cache and of activation workspace over all ranks.
  uint64_t kv_cache_bytes() const;
  uint64_t workspace_bytes() const;

 private:
  std::vector<ModelRank> ranks_;
  ProcessGroup* group_;  // not owned
  std::vector<uint8_t> message_;
  ForwardBatch batch_;
  std::unique_ptr<RankThreads> others_;  // ranks 1.. of a group in this process
};

}  // namespace photon
