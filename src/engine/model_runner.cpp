#include "engine/model_runner.hpp"

namespace photon {

ModelRunner::ModelRunner(std::unique_ptr<Decoder> decoder, PagedKvCache kv_cache)
    : decoder_(std::move(decoder)), kv_cache_(std::move(kv_cache)) {}

void build_forward_batch(const SchedulerOutput& output, int32_t block_size, ForwardBatch& batch) {
  batch.clear();
  for (const ScheduledRequest& s : output.scheduled) {
    const Request& r = *s.request;
    const auto tokens = std::span(r.tokens).subspan(static_cast<size_t>(r.num_computed_tokens),
                                                    static_cast<size_t>(s.num_new_tokens));
    // Prompt logprobs need every row of the chunk; sampling needs the last one.
    const ForwardBatch::Logits rows = s.num_logits == 0                  ? ForwardBatch::Logits::kNone
                                      : s.num_logits == s.num_new_tokens ? ForwardBatch::Logits::kAll
                                                                         : ForwardBatch::Logits::kLast;
    batch.add_sequence(tokens, r.num_computed_tokens, r.block_table, block_size, rows);
  }
}

const ForwardBatch& ModelRunner::prepare(const SchedulerOutput& output) {
  build_forward_batch(output, static_cast<int32_t>(kv_cache_.block_size()), batch_);
  return batch_;
}

Result<Tensor> ModelRunner::execute() { return decoder_->forward(batch_, kv_cache_); }

}  // namespace photon
