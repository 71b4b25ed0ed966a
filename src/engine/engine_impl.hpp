// Engine::Impl: the engine's state, shared by the public API (engine.cpp) and the step loop (step.cpp).
//
// Two kinds of state live here. The step thread's: the scheduler, the model runner, the text streams and the step
// on its way through the device; only step() touches them (under step_mu). The shared: the inbox of submitted
// requests, pending cancels and the event queue; every thread touches them, under `mu`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <photon/engine.hpp>

#include "core/process_group.hpp"
#include "engine/model_runner.hpp"
#include "engine/sampler.hpp"
#include "engine/text_stream.hpp"
#include "scheduler/scheduler.hpp"

namespace photon {

/// One step on its way through the device: planned, its forward pass and its device sampling enqueued.
struct LaunchedStep {
  SchedulerOutput out;
  Status status;  ///< a launch that failed: its requests are failed when the step completes
  Tensor logits;  ///< [out.num_logits, vocab] on the device; valid until the next launch
  /// Device sample k belongs to out.scheduled[device_owner[k]]; its id arrives in host_ids[k].
  std::vector<size_t> device_owner;
  /// The device samples whose chosen tokens' logprobs the backend computes too (Backend::sampled_logprobs), in order:
  /// out.scheduled indices, as device_owner.
  std::vector<size_t> logprob_owner;
  int32_t* host_ids = nullptr;
  /// The requests' prompt logprobs among the queries enqueued with the step's sampling (Backend::
  /// enqueue_token_logprobs), read when it completes: out.scheduled index, the first query, their count, the top
  /// tokens the request asked for (the queries ask for the most any did), and the first prompt position reported.
  struct PromptLogprobs {
    size_t request = 0;
    size_t begin = 0;
    size_t count = 0;
    int32_t top_k = 0;
    int32_t first_position = 0;
  };
  std::vector<PromptLogprobs> prompt_logprobs;
};

// Internal: hidden from the shared library's exported symbols (the class around it is public API).
struct __attribute__((visibility("hidden"))) Engine::Impl {
  using Clock = std::chrono::steady_clock;

  // ---- fixed at creation ----
  EngineConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  ModelInfo info;
  Clock::time_point epoch = Clock::now();
  std::unique_ptr<ProcessGroup> group;             // multi-process tensor parallelism: the other ranks
  std::vector<std::unique_ptr<Backend>> backends;  // one per tensor-parallel rank hosted here
  Backend* backend = nullptr;                      // rank 0's: sampling and logits
  std::vector<std::unique_ptr<Communicator>> communicators;
  uint64_t weight_bytes = 0;
  std::unique_ptr<ModelRunner> runner;
  bool async = false;                 // config.async_scheduling, and the decoder takes placeholders (one rank)
  Tensor own_sampled_ids;             // where sample() writes when the decoder's buffer is not available
  Tensor* device_ids = nullptr;       // where sample() writes: the decoder's sampled_ids(), or own_sampled_ids
  std::shared_ptr<void> host_ids[2];  // page-locked, max_num_logits ids each; steps use them in turn

  // ---- the step thread's ----
  std::unique_ptr<Scheduler> scheduler;
  std::unordered_map<uint64_t, TextStream> text_streams;  // per request id, with a tokenizer
  std::optional<LaunchedStep> inflight;                   // launched, not yet completed
  int next_host_ids = 0;
  std::vector<LogprobQuery> logprob_queries;  // a step's prompt logprobs
  std::vector<SampleRequest> device_samples;
  std::vector<LogitAdjustment> logit_adjustments;
  std::vector<int32_t> adjustment_counts;  // append_logit_adjustments' scratch
  int64_t num_steps = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_generated_tokens = 0;

  // ---- shared with submitting and polling threads, under `mu` ----
  mutable std::mutex mu;
  std::condition_variable events_cv;
  std::condition_variable work_cv;
  std::vector<std::unique_ptr<Request>> inbox;
  std::vector<uint64_t> cancels;
  std::deque<RequestEvent> events;
  uint64_t next_id = 1;
  uint64_t next_arrival = 0;
  int64_t num_unfinished = 0;
  std::unordered_set<uint64_t> live;  // submitted and not yet finished
  EngineStats last_stats;

  // ---- the engine-owned loop (start / stop) ----
  std::mutex step_mu;
  std::thread loop;
  bool loop_running = false;
  bool stop_requested = false;

  ~Impl() {
    // A step may still run on the devices (async scheduling): it writes host buffers freed below.
    for (auto& b : backends) b->synchronize();
  }
  double now() const { return std::chrono::duration<double>(Clock::now() - epoch).count(); }

  // The step loop (step.cpp).
  Status step();
  /// The step boundary: queued submissions join the scheduler (with their text streams), cancels are applied.
  void admit_requests();
  /// Builds `out`'s batch and enqueues its forward pass (not its sampling: see sample()).
  LaunchedStep launch(SchedulerOutput out);
  /// Enqueues the device sampling of a launched step, and the prompt logprobs of its rows that report them; their
  /// answers then travel to the host on their own. Called once the step before it has completed (penalties read
  /// every committed token, and a backend samples one step at a time).
  void sample(LaunchedStep& step);
  /// The prompt logprobs part of sample(): the queries of the step's rows whose prompt logprobs are not reported yet.
  Status enqueue_prompt_logprobs(LaunchedStep& step);
  /// Moves the step's requests past it in the scheduler, each sampled token a placeholder until complete().
  void advance(const LaunchedStep& step);
  /// Whether the next step may be planned and launched before this one completes (async scheduling).
  bool may_launch_ahead(const LaunchedStep& step) const;
  /// Waits for the step's ids, reads what the host needs, commits them to the scheduler and emits the events.
  Status complete(LaunchedStep& step);
  /// The prompt logprobs of the step's rows (computed by the backend where the logits are) into the events of the
  /// requests that asked. Errors: the backend's.
  Status read_prompt_logprobs(const LaunchedStep& step, std::vector<RequestEvent>& events);
  /// After the step's samples arrived: the logprobs of the tokens sampled for requests that asked, into their
  /// events. Errors: the backend's.
  Status read_device_logprobs(const LaunchedStep& step, std::vector<RequestEvent>& events);
  /// Finishes every request of `out` with `status` (the engine stays usable) and returns it.
  Status fail(const SchedulerOutput& out, const Status& status);
  /// Every step() ends here: deletes the finished requests, refreshes the stats, returns `status`.
  Status end_step(Status status = Status::ok());
  void refresh_stats();

  // Events (engine.cpp).
  /// An event for `r` carrying `e`'s payload (tokens, text, logprobs, error): fills in the request's counters and
  /// times, and when `r` has finished, retires it. Thread-safe (takes `mu`).
  void emit(const Request& r, RequestEvent e);
  /// The part of emit() under `mu`: queues the event and retires a finished request.
  void publish_locked(RequestEvent e);
  void run_loop();
};

}  // namespace photon
