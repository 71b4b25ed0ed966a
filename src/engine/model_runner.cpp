#include "engine/model_runner.hpp"

#include <chrono>

#include <fmt/format.h>

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

ModelRunner::ModelRunner(std::vector<ModelRank> ranks) : ranks_(std::move(ranks)) {
  worker_status_.resize(ranks_.size());
  for (size_t r = 1; r < ranks_.size(); ++r) workers_.emplace_back([this, r] { worker(r); });
}

ModelRunner::~ModelRunner() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    generation_.fetch_add(1);
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

const ForwardBatch& ModelRunner::prepare(const SchedulerOutput& output) {
  build_forward_batch(output, static_cast<int32_t>(kv_cache().block_size()), batch_);
  return batch_;
}

void ModelRunner::worker(size_t rank) {
  ModelRank& me = ranks_[rank];
  Status bound = me.backend->make_current();
  uint64_t seen = 0;
  for (;;) {
    // Steps come back to back while requests run: spin briefly before sleeping, so a step does not pay for a
    // thread wake-up on every rank.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(500);
    while (generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < spin_until) {
    }
    {
      std::unique_lock lock(mu_);
      start_cv_.wait(lock, [&] { return generation_.load() != seen; });
      if (stopping_) return;
    }
    seen = generation_.load();
    Status status = bound;
    if (status.is_ok()) {
      auto logits = me.decoder->forward(batch_, me.kv_cache);
      if (!logits) status = logits.status().with_context(fmt::format("tensor-parallel rank {}", rank));
    }
    worker_status_[rank] = std::move(status);
    {
      std::lock_guard lock(mu_);
      finished_.fetch_add(1, std::memory_order_release);
    }
    done_cv_.notify_one();
  }
}

Result<Tensor> ModelRunner::execute() {
  ModelRank& first = ranks_[0];
  // step() may run on any thread (the engine's background loop, say): bind it to rank 0's device first.
  PHOTON_RETURN_IF_ERROR(first.backend->make_current());
  if (workers_.empty()) return first.decoder->forward(batch_, first.kv_cache);
  {
    std::lock_guard lock(mu_);
    finished_.store(0);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  auto logits = first.decoder->forward(batch_, first.kv_cache);
  {
    // Every rank must be done with batch_ before the next prepare() rewrites it.
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return finished_.load() == static_cast<int>(workers_.size()); });
  }
  if (!logits) return logits.status();
  for (size_t r = 1; r < ranks_.size(); ++r) PHOTON_RETURN_IF_ERROR(worker_status_[r]);
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
