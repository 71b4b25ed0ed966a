#include "engine/model_runner.hpp"

#include "core/logging.hpp"
#include "engine/batch_message.hpp"

namespace photon {

void build_forward_batch(const SchedulerOutput& output, int32_t block_size, ForwardBatch& batch) {
  batch.clear();
  for (const ScheduledRequest& s : output.scheduled) {
    const Request& r = *s.request;
    const auto tokens =
        std::span(r.tokens).subspan(static_cast<size_t>(r.num_computed_tokens), static_cast<size_t>(s.num_new_tokens));
    // Prompt logprobs need every row of the chunk; sampling needs the last one.
    const ForwardBatch::Logits rows = s.num_logits == 0                  ? ForwardBatch::Logits::kNone
                                      : s.num_logits == s.num_new_tokens ? ForwardBatch::Logits::kAll
                                                                         : ForwardBatch::Logits::kLast;
    batch.add_sequence(tokens, r.num_computed_tokens, r.block_table, block_size, rows);
  }
}

ModelRunner::ModelRunner(std::vector<ModelRank> ranks, ProcessGroup* group) : ranks_(std::move(ranks)), group_(group) {
  if (ranks_.size() > 1) others_ = std::make_unique<RankThreads>(std::span(ranks_).subspan(1), batch_, 1);
}

ModelRunner::~ModelRunner() {
  if (group_ != nullptr) {
    std::vector<uint8_t> stop = stop_message();
    const Status s = group_->broadcast(stop);
    if (!s.is_ok()) log::warn("telling the other tensor-parallel processes to stop: {}", s.message());
  }
  others_.reset();
}

const ForwardBatch& ModelRunner::prepare(const SchedulerOutput& output) {
  build_forward_batch(output, static_cast<int32_t>(kv_cache().block_size()), batch_);
  return batch_;
}

Result<Tensor> ModelRunner::execute() {
  ModelRank& first = ranks_[0];
  // step() may run on any thread (the engine's background loop, say): bind it to rank 0's device first.
  PHOTON_RETURN_IF_ERROR(first.backend->make_current());
  if (group_ != nullptr) {
    serialize_batch(batch_, message_);
    PHOTON_RETURN_IF_ERROR(group_->broadcast(message_).with_context("sending the step to the other ranks"));
  }
  if (!others_) return first.decoder->forward(batch_, first.kv_cache);
  others_->start();
  auto logits = first.decoder->forward(batch_, first.kv_cache);
  // Every rank must be done with batch_ before the next prepare() rewrites it.
  const Status others = others_->wait();
  if (!logits) return logits.status();
  PHOTON_RETURN_IF_ERROR(others);
  return logits;
}

uint64_t ModelRunner::kv_cache_bytes() const {
  uint64_t total = 0;
  for (const ModelRank& r : ranks_) total += r.kv_cache.bytes();
  return total;
}

uint64_t ModelRunner::workspace_bytes() const {
  uint64_t total = 0;
  for (const ModelRank& r : ranks_) total += r.decoder->workspace_bytes();
  return total;
}

}  // namespace photon
