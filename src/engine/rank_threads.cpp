#include "engine/rank_threads.hpp"

#include <chrono>

#include <fmt/format.h>

namespace photon {

RankThreads::RankThreads(std::span<ModelRank> ranks, const ForwardBatch& batch, int first_rank)
    : ranks_(ranks), batch_(batch), first_rank_(first_rank), status_(ranks.size()) {
  for (size_t i = 0; i < ranks_.size(); ++i) threads_.emplace_back([this, i] { run(i); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    generation_.fetch_add(1);
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::start() {
  {
    std::lock_guard lock(mu_);
    finished_.store(0);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
}

Status RankThreads::wait() {
  {
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return finished_.load() == static_cast<int>(threads_.size()); });
  }
  for (const Status& s : status_) PHOTON_RETURN_IF_ERROR(s);
  return Status::ok();
}

void RankThreads::run(size_t index) {
  ModelRank& me = ranks_[index];
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
      if (!logits) {
        status =
            logits.status().with_context(fmt::format("tensor-parallel rank {}", first_rank_ + static_cast<int>(index)));
      }
    }
    status_[index] = std::move(status);
    {
      std::lock_guard lock(mu_);
      finished_.fetch_add(1, std::memory_order_release);
    }
    done_cv_.notify_one();
  }
}

}  // namespace photon
