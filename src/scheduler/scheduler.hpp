// Scheduler: continuous batching over the paged KV cache (vLLM v1 / SARATHI style).
//
// Every step has one token budget (max_num_batched_tokens) and a cap on sequences (max_num_seqs). There are no
// separate prefill and decode phases: running requests are served first (their next decode token, or the next
// chunk of a prompt), then waiting requests are admitted in (priority, arrival) order while budget, sequence slots
// and KV blocks last. When blocks run out, the running request with the lowest priority (most recently admitted on
// ties) is preempted by recompute: its blocks are freed, it returns to the front of the queue, and its generated
// tokens are kept and recomputed as part of its prompt when it resumes.
//
// The scheduler decides; it does not run the model. schedule() returns a plain SchedulerOutput, the caller runs
// it, and update() applies the sampled tokens. Not thread-safe: the engine drives it from its step thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include <photon/status.hpp>

#include "scheduler/block_manager.hpp"
#include "scheduler/request.hpp"

namespace photon {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_logits = 2048;  ///< rows of logits per step (prompt logprobs need one per prompt token)
  int32_t max_model_len = 4096;
  int32_t num_blocks = 1024;
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
};

/// One request's share of a step.
struct ScheduledRequest {
  Request* request = nullptr;
  int32_t num_new_tokens = 0;  ///< tokens [num_computed_tokens, num_computed_tokens + num_new_tokens) run now
  bool sample = false;         ///< the chunk reaches the end of the known tokens: sample the next one
  int32_t logits_begin = 0;    ///< first row of this request's logits in the step's logits
  int32_t num_logits = 0;      ///< rows: every chunk row for prompt logprobs, else 1 when sampling, else 0
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  ///< running requests first, then newly admitted
  std::vector<uint64_t> preempted;          ///< ids preempted while scheduling this step
  int32_t num_tokens = 0;
  int32_t num_logits = 0;
  bool empty() const { return scheduled.empty(); }
};

struct SchedulerStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;  ///< prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits = 0;     ///< of which served from cached blocks
  int32_t num_free_blocks = 0;
  int32_t num_blocks = 0;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  /// Queues a request (state WAITING). Rejects, without queueing, a prompt that cannot fit: longer than
  /// max_model_len with max_tokens, or than the whole KV cache.
  Status add_request(std::unique_ptr<Request> request);

  /// Plans the next step. Output pointers stay valid until update().
  SchedulerOutput schedule();

  /// Applies a step's results. `sampled[i]` is the token sampled for output.scheduled[i] (ignored unless it
  /// sampled). Appends tokens, advances num_computed_tokens, registers full blocks with the prefix cache and
  /// finishes requests that hit EOS, a stop id, a stop string, max_tokens or max_model_len — the one place where a
  /// generating request ends. `stop_string_hit[i]` non-zero says that the text of output.scheduled[i]'s new token
  /// completed one of its stop strings (the engine's text stream decides that; empty: none did). Returns the
  /// requests that finished.
  std::vector<Request*> update(const SchedulerOutput& output, std::span<const int32_t> sampled,
                               std::span<const uint8_t> stop_string_hit = {});
  /// update() in two halves, for planning the next step before this one's ids are known (async scheduling).
  /// advance(): advances num_computed_tokens, registers full blocks and appends `placeholders[i]` (a stand-in the
  /// model can resolve, see ForwardBatch::token_ids) for every request that sampled, so schedule() can plan the next
  /// step. commit(): writes the sampled ids over the placeholders and applies the stop checks; must follow the
  /// advance() of the same output before anything else appends tokens. Entries whose request is null (dropped by
  /// the caller) or finished are skipped by both. A request whose placeholder reaches its max_tokens or
  /// max_model_len is not planned into the next step: commit() will finish it, and its row would be computed only
  /// to be dropped.
  void advance(const SchedulerOutput& output, std::span<const int32_t> placeholders);
  std::vector<Request*> commit(const SchedulerOutput& output, std::span<const int32_t> sampled,
                               std::span<const uint8_t> stop_string_hit = {});

  /// Ends a request now (cancel, error): frees its blocks. False when the id is unknown or finished.
  bool finish_request(uint64_t id, FinishReason reason);

  /// Drops finished requests (after their final events were emitted).
  void remove_finished();

  Request* find(uint64_t id);
  bool has_unfinished() const { return !running_.empty() || !waiting_.empty(); }
  SchedulerStats stats() const;
  const BlockManager& block_manager() const { return blocks_; }
  const SchedulerConfig& config() const { return config_; }
  /// The model's end-of-sequence ids (set once by the engine).
  void set_eos_ids(std::vector<int32_t> ids) { eos_ids_ = std::move(ids); }

  /// Checks the bookkeeping invariants (block ownership, reference counts, queue membership). For tests.
  Status check_invariants() const;

 private:
  using QueueKey = std::pair<int64_t, uint64_t>;  // (priority, arrival)
  static QueueKey key(const Request& r) { return {r.params.priority, r.arrival}; }
  void preempt(Request* r);
  void free_request(Request* r);
  bool check_stop(Request& r, bool stop_string_hit) const;
  /// Whether r's tokens (a placeholder not yet committed included) reach max_tokens or max_model_len.
  bool reaches_length(const Request& r) const;

  SchedulerConfig config_;
  BlockManager blocks_;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests_;
  std::map<QueueKey, Request*> waiting_;
  std::vector<Request*> running_;  // admission order
  std::vector<Request*> finished_;
  std::vector<int32_t> eos_ids_;
  int64_t num_preemptions_ = 0;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
};

}  // namespace photon
