#include "engine/model_runner.hpp"

#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "core/logging.hpp"

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

namespace {

// Message layout: a kind word, then for a batch each array as its length and its int32 values, in the order below.
constexpr uint32_t kBatchMessage = 0x42415443;  // "BATC"
constexpr uint32_t kStopMessage = 0x53544f50;   // "STOP"

// Calls f on each index array of a batch (const or not), in message order.
template <typename Batch, typename F>
void for_each_array(Batch& b, const F& f) {
  f(b.token_ids);
  f(b.positions);
  f(b.slot_mapping);
  f(b.query_start);
  f(b.seq_lens);
  f(b.block_indptr);
  f(b.block_indices);
  f(b.logits_indices);
}

void put(std::vector<uint8_t>& out, const void* data, size_t bytes) {
  const size_t at = out.size();
  out.resize(at + bytes);
  if (bytes > 0) std::memcpy(out.data() + at, data, bytes);
}
void put_u32(std::vector<uint8_t>& out, uint32_t v) { put(out, &v, sizeof(v)); }

}  // namespace

void serialize_batch(const ForwardBatch& batch, std::vector<uint8_t>& out) {
  out.clear();
  put_u32(out, kBatchMessage);
  for_each_array(batch, [&](const std::vector<int32_t>& a) {
    put_u32(out, static_cast<uint32_t>(a.size()));
    put(out, a.data(), a.size() * sizeof(int32_t));
  });
}

Status deserialize_batch(std::span<const uint8_t> bytes, ForwardBatch& batch) {
  size_t at = 0;
  const auto take_u32 = [&](uint32_t* v) {
    if (bytes.size() - at < sizeof(*v)) return false;
    std::memcpy(v, bytes.data() + at, sizeof(*v));
    at += sizeof(*v);
    return true;
  };
  uint32_t kind = 0;
  if (!take_u32(&kind) || kind != kBatchMessage) return Status(StatusCode::kFormatError, "not a batch message");
  bool ok = true;
  for_each_array(batch, [&](std::vector<int32_t>& a) {
    uint32_t n = 0;
    if (!ok || !take_u32(&n) || (bytes.size() - at) / sizeof(int32_t) < n) {
      ok = false;
      return;
    }
    a.resize(n);
    std::memcpy(a.data(), bytes.data() + at, n * sizeof(int32_t));
    at += n * sizeof(int32_t);
  });
  if (!ok || at != bytes.size()) return Status(StatusCode::kFormatError, "a truncated or oversized batch message");
  return Status::ok();
}

std::vector<uint8_t> stop_message() {
  std::vector<uint8_t> out;
  put_u32(out, kStopMessage);
  return out;
}

bool is_stop_message(std::span<const uint8_t> bytes) {
  uint32_t kind = 0;
  if (bytes.size() != sizeof(kind)) return false;
  std::memcpy(&kind, bytes.data(), sizeof(kind));
  return kind == kStopMessage;
}

ModelRunner::ModelRunner(std::vector<ModelRank> ranks, ProcessGroup* group) : ranks_(std::move(ranks)), group_(group) {
  worker_status_.resize(ranks_.size());
  for (size_t r = 1; r < ranks_.size(); ++r) workers_.emplace_back([this, r] { worker(r); });
}

ModelRunner::~ModelRunner() {
  if (group_ != nullptr) {
    std::vector<uint8_t> stop = stop_message();
    const Status s = group_->broadcast(stop);
    if (!s.is_ok()) log::warn("telling the other tensor-parallel processes to stop: {}", s.message());
  }
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
  if (group_ != nullptr) {
    serialize_batch(batch_, message_);
    PHOTON_RETURN_IF_ERROR(group_->broadcast(message_).with_context("sending the step to the other ranks"));
  }
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
