// ModelRunner: turns a SchedulerOutput into one forward pass of the decoder over the paged KV cache.
#pragma once

#include <memory>

#include "models/decoder.hpp"
#include "models/kv_cache.hpp"
#include "scheduler/scheduler.hpp"

namespace photon {

/// Fills `batch` with the ragged batch of `output`: each scheduled request's new tokens, positions, KV slots and
/// block table, and the logit rows it needs (every row of a prompt-logprobs chunk, else the last when sampling).
void build_forward_batch(const SchedulerOutput& output, int32_t block_size, ForwardBatch& batch);

class ModelRunner {
 public:
  ModelRunner(std::unique_ptr<Decoder> decoder, PagedKvCache kv_cache);

  /// Builds the ragged batch for `output` (host arrays, reused between steps; no allocation once warm).
  const ForwardBatch& prepare(const SchedulerOutput& output);
  /// Runs the prepared batch; returns logits [output.num_logits, vocab] readable on the host.
  Result<Tensor> execute();

  const Decoder& decoder() const { return *decoder_; }
  const PagedKvCache& kv_cache() const { return kv_cache_; }

 private:
  std::unique_ptr<Decoder> decoder_;
  PagedKvCache kv_cache_;
  ForwardBatch batch_;
};

}  // namespace photon
