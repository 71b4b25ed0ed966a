#include <photon/engine.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>

#include "core/logging.hpp"
#include "core/process_group.hpp"
#if defined(PHOTON_WITH_CUDA)
#include "cuda/cuda_allocator.hpp"
#endif
#include "engine/model_runner.hpp"
#include "engine/model_setup.hpp"
#include "engine/sampler.hpp"
#include "engine/text_stream.hpp"
#include "models/model_loader.hpp"
#include "models/tensor_parallel.hpp"
#include "scheduler/scheduler.hpp"

namespace photon {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t mix_seed(uint64_t a, uint64_t b) { return a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull); }

// Requests the backend's sampler serves completely (penalties, temperature, top-k, top-p, min-p); those that want
// logprobs of the raw logits sample on the host from a copy of their row. Both apply penalties and select the same
// way (cpu::apply_penalties, cpu::sample_row).
bool samples_on_device(const SamplingParams& p) { return !p.logprobs; }

}  // namespace

int cuda_device_count() {
#if defined(PHOTON_WITH_CUDA)
  return cuda::device_count();
#else
  return 0;
#endif
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

// Internal: hidden from the shared library's exported symbols (the class around it is public API).
struct __attribute__((visibility("hidden"))) Engine::Impl {
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
  std::unique_ptr<Scheduler> scheduler;
  SamplerScratch scratch;
  std::vector<int32_t> sampled;
  std::vector<float> host_logits_buffer;
  std::vector<SampleRequest> device_samples;
  std::vector<PenaltyToken> penalty_tokens;
  int64_t num_steps = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_generated_tokens = 0;

  // Shared with submitting / polling threads.
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

  std::mutex step_mu;
  std::thread loop;
  bool loop_running = false;
  bool stop_requested = false;

  // A step's device sampling, enqueued: its ids arrive in host_ids.
  struct DeviceSamples {
    std::vector<size_t> owner;  // sample k belongs to the step's scheduled[owner[k]]
    int32_t* host_ids = nullptr;
  };
  // Async scheduling: a step whose forward pass and device sampling are enqueued.
  struct InFlight {
    SchedulerOutput out;
    DeviceSamples samples;
  };
  // Host-side results of a step, per scheduled request, until they are emitted.
  struct Pending {
    std::vector<TokenLogprob> prompt_logprobs;
    int32_t prompt_begin = 1;
    std::vector<TokenLogprob> logprobs;
  };
  std::optional<InFlight> inflight;
  bool async = false;                 // config.async_scheduling, and the decoder takes placeholders (one rank)
  Tensor own_sampled_ids;             // where sample() writes when the decoder's buffer is not available
  Tensor* device_ids = nullptr;       // where sample() writes: the decoder's sampled_ids(), or own_sampled_ids
  std::shared_ptr<void> host_ids[2];  // page-locked, max_num_logits ids each
  int next_host_ids = 0;

  ~Impl() {
    // A step may still run on the devices (async scheduling): it writes host buffers freed below.
    for (auto& b : backends) b->synchronize();
  }
  double now() const { return std::chrono::duration<double>(Clock::now() - epoch).count(); }
  Status step();
  Result<Tensor> launch(const SchedulerOutput& out);
  /// True when `out` may stay in flight: every token it samples is chosen on the device and no row goes to the host.
  bool deferrable(const SchedulerOutput& out) const;
  /// Enqueues `out`'s device sampling and leaves it in flight; on error fails its requests and returns the error.
  Status defer(SchedulerOutput out, Tensor& logits);
  /// Enqueues the device sampling (penalties in place on `logits`, then selection) of the requests of `out` that
  /// sample on the device.
  Status enqueue_samples(const SchedulerOutput& out, Tensor& logits, DeviceSamples& samples);
  void count_prompt_tokens(const SchedulerOutput& out);
  /// Forgets the finished requests of a planned step (nulls them), which remove_finished() may then delete.
  static void drop_finished(SchedulerOutput& out) {
    for (ScheduledRequest& s : out.scheduled) {
      if (s.request != nullptr && s.request->is_finished()) s.request = nullptr;
    }
  }
  /// Finishes every request of `out` with `status` (the engine stays usable) and returns it.
  Status fail(const SchedulerOutput& out, const Status& status);
  /// Completes a step now: host-side logprobs and sampling, device sampling, update, emit.
  Status finish(const SchedulerOutput& out, Tensor& logits);
  /// Emits the tokens in `sampled` (and pending logprobs) of a step whose scheduler update is done.
  void emit_step(const SchedulerOutput& out, std::vector<Pending> pending);
  void emit(Request& r, std::vector<int32_t> new_tokens, std::vector<TokenLogprob> logprobs,
            std::vector<TokenLogprob> prompt_logprobs, int32_t prompt_begin, const std::string& error = {},
            std::string text = {});
  void refresh_stats();
  /// Every step ends here: deletes the finished requests, refreshes the stats, returns `status`.
  Status end_step(Status status = Status::ok()) {
    scheduler->remove_finished();
    refresh_stats();
    return status;
  }
  void run_loop();
};

Engine::Engine() : impl_(std::make_unique<Impl>()) {}

Engine::~Engine() { stop(); }

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config) {
  std::unique_ptr<Engine> engine(new Engine());
  Impl& m = *engine->impl_;
  m.config = config;
  if (config.block_size < 1 || config.block_size > 1024) {
    return Status(StatusCode::kInvalidArgument, "block_size must be from 1 to 1024");
  }
  if (config.max_num_seqs < 1 || config.max_num_batched_tokens < 1) {
    return Status(StatusCode::kInvalidArgument, "max_num_seqs and max_num_batched_tokens must be positive");
  }
  if (!(config.memory_utilization >= 0.0 && config.memory_utilization <= 1.0)) {
    return Status(StatusCode::kInvalidArgument, "memory_utilization must be in (0, 1] (or 0 for the default)");
  }
  PHOTON_ASSIGN_OR_RETURN(const ModelSource source, model_source(config));
  if (!config.dist_init_addr.empty() && config.rank != 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("rank {} of a multi-process group serves rank 0 (run_tensor_parallel_worker; the photon "
                              "commands do this themselves): only rank 0 creates an Engine",
                              config.rank));
  }
  PHOTON_ASSIGN_OR_RETURN(const ModelConfig mc, load_config(source));
  PHOTON_RETURN_IF_ERROR(check_tensor_parallel(mc, std::max(1, config.tensor_parallel_size)));
  {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string path = config.tokenizer;
    if (path.empty() && !config.model.starts_with("dummy:") &&
        fs::exists(fs::path(config.model) / "tokenizer.json", ec)) {
      path = config.model;
    }
    if (!path.empty()) {
      auto tok = Tokenizer::load(path);
      if (!tok) return tok.status().with_context("loading the tokenizer");
      if ((*tok)->vocab_size() > mc.vocab_size) {
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("the tokenizer has {} ids but the model only {}; give the model's own tokenizer",
                                  (*tok)->vocab_size(), mc.vocab_size));
      }
      m.tokenizer = std::move(*tok);
      // The chat template comes from the same folder; a folder without one simply has no chat support.
      const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
      if (fs::exists(dir / "tokenizer_config.json", ec)) {
        auto tmpl = ChatTemplate::load(dir.string());
        if (tmpl) {
          m.chat_template = std::move(*tmpl);
        } else if (tmpl.status().code() != StatusCode::kNotFound) {
          return tmpl.status().with_context("loading the chat template");
        }
      }
    }
  }
  PHOTON_ASSIGN_OR_RETURN(LocalModel local, build_local_model(config, source, mc));
  m.group = std::move(local.group);
  m.backends = std::move(local.backends);
  m.communicators = std::move(local.communicators);
  m.backend = m.backends[0].get();
  m.weight_bytes = local.weight_bytes;
  const DecoderLimits limits = local.limits;
  const auto max_model_len = static_cast<int32_t>(limits.max_seq_len);
  const int64_t num_blocks = local.num_blocks;
  m.runner = std::make_unique<ModelRunner>(std::move(local.ranks), m.group.get());
  m.device_ids = m.runner->sampled_ids();
  m.async = config.async_scheduling && m.device_ids != nullptr;
  if (m.device_ids == nullptr) {
    PHOTON_ASSIGN_OR_RETURN(m.own_sampled_ids,
                            Tensor::empty({limits.max_num_logits}, DType::kI32, m.backend->allocator()));
    m.device_ids = &m.own_sampled_ids;
  }
  for (auto& buffer : m.host_ids) {
    PHOTON_ASSIGN_OR_RETURN(buffer,
                            m.backend->allocate_host(static_cast<size_t>(limits.max_num_logits) * sizeof(int32_t)));
  }

  SchedulerConfig sc;
  sc.max_num_seqs = config.max_num_seqs;
  sc.max_num_batched_tokens = config.max_num_batched_tokens;
  sc.max_num_logits = static_cast<int32_t>(limits.max_num_logits);
  sc.max_model_len = max_model_len;
  sc.num_blocks = static_cast<int32_t>(num_blocks);
  sc.block_size = config.block_size;
  sc.enable_prefix_caching = config.enable_prefix_caching;
  m.scheduler = std::make_unique<Scheduler>(sc);
  m.scheduler->set_eos_ids(mc.eos_token_ids);

  m.info.architecture = mc.architecture_name;
  m.info.vocab_size = mc.vocab_size;
  m.info.max_model_len = max_model_len;
  m.info.eos_token_ids = mc.eos_token_ids;
  m.info.bos_token_id = mc.bos_token_id;
  m.info.device = m.backend->device().to_string();
  m.info.device_description = m.backend->description();
  m.refresh_stats();
  log::info("engine ready: {} on {}, {:.2f} GB weights, KV cache {} blocks x {} tokens ({:.2f} GB)",
            mc.architecture_name, m.info.device, static_cast<double>(m.weight_bytes) / 1e9, num_blocks,
            config.block_size, static_cast<double>(m.runner->kv_cache_bytes()) / 1e9);
  return engine;
}

Result<uint64_t> Engine::submit(std::vector<int32_t> prompt, const SamplingParams& params) {
  Impl& m = *impl_;
  PHOTON_RETURN_IF_ERROR(params.validate(m.info.vocab_size));
  if (!params.stop.empty() && !m.tokenizer) {
    return Status(StatusCode::kUnsupported,
                  "stop strings need a tokenizer, which this engine does not have; give "
                  "one (EngineConfig::tokenizer) or use stop_token_ids");
  }
  if (prompt.empty()) return Status(StatusCode::kInvalidArgument, "the prompt is empty; give at least one token");
  for (int32_t id : prompt) {
    if (id < 0 || id >= m.info.vocab_size) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("prompt token id {} is outside the vocabulary (0..{})", id, m.info.vocab_size - 1));
    }
  }
  const int64_t total = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (total > m.info.max_model_len) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the prompt ({} tokens) plus max_tokens ({}) is {} tokens, more than max_model_len "
                              "({}); shorten the prompt or lower max_tokens",
                              prompt.size(), params.max_tokens, total, m.info.max_model_len));
  }
  auto r = std::make_unique<Request>();
  if (m.tokenizer) r->text_stream = std::make_shared<TextStream>(*m.tokenizer, prompt, params.stop);
  r->params = params;
  r->num_prompt_tokens = static_cast<int32_t>(prompt.size());
  r->tokens = std::move(prompt);
  r->tokens.reserve(static_cast<size_t>(total));
  r->arrival_time = m.now();
  std::lock_guard lock(m.mu);
  r->id = m.next_id++;
  r->arrival = m.next_arrival++;
  r->seed = params.seed ? *params.seed : mix_seed(m.config.seed, r->id);
  const uint64_t id = r->id;
  m.inbox.push_back(std::move(r));
  m.live.insert(id);
  ++m.num_unfinished;
  m.work_cv.notify_all();
  return id;
}

Result<uint64_t> Engine::submit_text(std::string_view prompt, const SamplingParams& params) {
  if (!impl_->tokenizer) {
    return Status(StatusCode::kUnsupported,
                  "this engine has no tokenizer, so it takes token ids only; give one "
                  "(EngineConfig::tokenizer, or a model folder with tokenizer.json)");
  }
  return submit(impl_->tokenizer->encode(prompt, /*add_special_tokens=*/true), params);
}

Result<uint64_t> Engine::submit_chat(std::string_view messages_json, const SamplingParams& params,
                                     const ChatTemplate::Options& options, std::string_view tools_json) {
  if (!impl_->tokenizer || !impl_->chat_template) {
    return Status(StatusCode::kUnsupported,
                  "this engine has no chat template (tokenizer_config.json with a "
                  "chat_template); give the prompt as text or token ids");
  }
  PHOTON_ASSIGN_OR_RETURN(std::string prompt, impl_->chat_template->render(messages_json, tools_json, options));
  return submit(impl_->tokenizer->encode(prompt, /*add_special_tokens=*/false), params);
}

const Tokenizer* Engine::tokenizer() const { return impl_->tokenizer.get(); }

const ChatTemplate* Engine::chat_template() const { return impl_->chat_template.get(); }

Status Engine::cancel(uint64_t id) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  for (auto it = m.inbox.begin(); it != m.inbox.end(); ++it) {
    if ((*it)->id == id) {
      // Never scheduled: finish it right here.
      Request& r = **it;
      r.finish_reason = FinishReason::kCancelled;
      r.state = RequestState::kFinished;
      RequestEvent e;
      e.request_id = id;
      e.finished = true;
      e.finish_reason = FinishReason::kCancelled;
      e.num_prompt_tokens = r.num_prompt_tokens;
      e.arrival_time = r.arrival_time;
      e.finish_time = m.now();
      m.events.push_back(std::move(e));
      m.inbox.erase(it);
      m.live.erase(id);
      --m.num_unfinished;
      m.events_cv.notify_all();
      return Status::ok();
    }
  }
  if (!m.live.contains(id)) {
    return Status(StatusCode::kNotFound, fmt::format("no unfinished request with id {}", id));
  }
  m.cancels.push_back(id);  // checked against live requests at the next step boundary
  m.work_cv.notify_all();
  return Status::ok();
}

void Engine::Impl::emit(Request& r, std::vector<int32_t> new_tokens, std::vector<TokenLogprob> logprobs,
                        std::vector<TokenLogprob> prompt_logprobs, int32_t prompt_begin, const std::string& error,
                        std::string text) {
  RequestEvent e;
  e.request_id = r.id;
  e.token_ids = std::move(new_tokens);
  e.text = std::move(text);
  e.logprobs = std::move(logprobs);
  e.prompt_logprobs = std::move(prompt_logprobs);
  e.prompt_logprobs_begin = prompt_begin;
  e.finished = r.is_finished();
  e.finish_reason = r.finish_reason;
  e.error = error;
  e.num_prompt_tokens = r.num_prompt_tokens;
  e.num_output_tokens = r.num_output_tokens();
  e.num_cached_prompt_tokens = r.num_cached_prompt_tokens;
  e.arrival_time = r.arrival_time;
  e.first_token_time = r.first_token_time;
  e.finish_time = e.finished ? now() : 0.0;
  std::lock_guard lock(mu);
  if (e.finished) {
    --num_unfinished;
    live.erase(e.request_id);
  }
  events.push_back(std::move(e));
}

Status Engine::step() {
  std::lock_guard step_lock(impl_->step_mu);
  return impl_->step();
}

Status Engine::Impl::step() {
  // 1. Admit new requests and apply cancellations (the step boundary).
  std::vector<std::unique_ptr<Request>> incoming;
  std::vector<uint64_t> cancelled;
  {
    std::lock_guard lock(mu);
    incoming.swap(inbox);
    cancelled.swap(cancels);
  }
  for (auto& r : incoming) {
    Request& ref = *r;
    if (Status s = scheduler->add_request(std::move(r)); !s) {
      ref.finish_reason = FinishReason::kError;
      ref.state = RequestState::kFinished;
      emit(ref, {}, {}, {}, 1, s.message());
    }
  }
  for (uint64_t id : cancelled) {
    if (scheduler->finish_request(id, FinishReason::kCancelled)) emit(*scheduler->find(id), {}, {}, {}, 1);
  }
  if (inflight) drop_finished(inflight->out);

  // 2. Schedule and run a step, unless one is already in flight (async scheduling).
  if (!inflight) {
    SchedulerOutput out = scheduler->schedule();
    if (out.empty()) return end_step();
    auto logits = launch(out);
    if (!logits) return fail(out, logits.status());
    if (!deferrable(out)) return finish(out, *logits);
    if (Status st = defer(std::move(out), *logits); !st) return st;
  }

  // 3. A step N is in flight, its ids on their way to the host. Plan step N + 1 as if N's ids were known (each
  //    stands in as a placeholder the device resolves) and enqueue its forward pass, then take N's ids.
  InFlight current = std::move(*inflight);
  inflight.reset();
  const DeviceSamples& ids = current.samples;
  std::vector<int32_t> placeholders(current.out.scheduled.size(), -1);
  for (size_t k = 0; k < ids.owner.size(); ++k) placeholders[ids.owner[k]] = -static_cast<int32_t>(k) - 1;
  count_prompt_tokens(current.out);
  scheduler->advance(current.out, placeholders);
  SchedulerOutput next = scheduler->schedule();
  std::optional<Result<Tensor>> next_logits;
  if (!next.empty()) next_logits = launch(next);
  if (Status st = backend->wait_samples(); !st) {
    current.out.scheduled.insert(current.out.scheduled.end(), next.scheduled.begin(), next.scheduled.end());
    return fail(current.out, st);
  }
  sampled.assign(current.out.scheduled.size(), -1);
  for (size_t k = 0; k < ids.owner.size(); ++k) sampled[ids.owner[k]] = ids.host_ids[k];
  scheduler->commit(current.out, sampled);
  ++num_steps;
  emit_step(current.out, {});

  // 4. Step N + 1: left in flight when it can be, else completed now.
  if (next.empty()) return end_step();
  if (!*next_logits) return fail(next, next_logits->status());
  drop_finished(next);  // requests that stopped at step N: their extra token is discarded
  if (!deferrable(next)) return finish(next, **next_logits);
  if (Status st = defer(std::move(next), **next_logits); !st) return st;
  return end_step();
}

Result<Tensor> Engine::Impl::launch(const SchedulerOutput& out) {
  runner->prepare(out);
  return runner->execute();
}

bool Engine::Impl::deferrable(const SchedulerOutput& out) const {
  if (!async) return false;
  for (const ScheduledRequest& s : out.scheduled) {
    if (s.request == nullptr) continue;
    if (s.request->wants_prompt_logprobs() || (s.sample && !samples_on_device(s.request->params))) return false;
  }
  return true;
}

Status Engine::Impl::defer(SchedulerOutput out, Tensor& logits) {
  InFlight f;
  f.out = std::move(out);
  if (Status st = enqueue_samples(f.out, logits, f.samples); !st) return fail(f.out, st);
  inflight = std::move(f);
  return Status::ok();
}

Status Engine::Impl::enqueue_samples(const SchedulerOutput& out, Tensor& logits, DeviceSamples& samples) {
  device_samples.clear();
  penalty_tokens.clear();
  samples.owner.clear();
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    const ScheduledRequest& s = out.scheduled[i];
    if (s.request == nullptr || !s.sample || !samples_on_device(s.request->params)) continue;
    const Request& r = *s.request;
    SampleRequest d = sample_request(r.params, r.seed, static_cast<uint64_t>(r.num_output_tokens()));
    d.row = s.logits_begin + s.num_logits - 1;
    if (has_penalties(r.params)) {
      const std::span<const int32_t> all(r.tokens);
      d.penalty_begin = static_cast<int32_t>(penalty_tokens.size());
      append_penalty_tokens(all.first(static_cast<size_t>(r.num_prompt_tokens)),
                            all.subspan(static_cast<size_t>(r.num_prompt_tokens)), scratch.counts, penalty_tokens);
      d.penalty_count = static_cast<int32_t>(penalty_tokens.size()) - d.penalty_begin;
    }
    device_samples.push_back(d);
    samples.owner.push_back(i);
  }
  // Two host buffers in turn: step N + 1's copy may land while the host still reads step N's ids.
  samples.host_ids = static_cast<int32_t*>(host_ids[next_host_ids].get());
  next_host_ids ^= 1;
  return backend->sample(logits, device_samples, penalty_tokens, *device_ids, samples.host_ids);
}

void Engine::Impl::count_prompt_tokens(const SchedulerOutput& out) {
  for (const auto& s : out.scheduled) {
    if (s.request == nullptr) continue;
    const Request& r = *s.request;
    num_prompt_tokens += std::max(0, std::min(s.num_new_tokens, r.num_prompt_tokens - r.num_computed_tokens));
  }
}

Status Engine::Impl::fail(const SchedulerOutput& out, const Status& status) {
  // The batch failed as a whole: finish its requests with the error; the engine stays usable.
  for (const auto& s : out.scheduled) {
    if (s.request != nullptr && scheduler->finish_request(s.request->id, FinishReason::kError)) {
      emit(*s.request, {}, {}, {}, 1, status.message());
    }
  }
  log::error("step failed: {}", status.to_string());
  return end_step(status);
}

Status Engine::Impl::finish(const SchedulerOutput& out, Tensor& logits) {
  const auto vocab = static_cast<size_t>(info.vocab_size);
  const bool host_logits = backend->device() == Device::cpu();
  // Rows [first, first + count) of the logits, readable on the host (copied when they live on a GPU).
  auto host_rows = [&](int32_t first, int32_t count) -> const float* {
    if (host_logits) return logits.data<float>() + static_cast<size_t>(first) * vocab;
    host_logits_buffer.resize(static_cast<size_t>(count) * vocab);
    backend->copy_to_host(logits.slice_rows(first, first + count), host_logits_buffer.data(),
                          host_logits_buffer.size() * sizeof(float));
    return host_logits_buffer.data();
  };
  sampled.assign(out.scheduled.size(), -1);
  std::vector<Pending> pending(out.scheduled.size());
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    const ScheduledRequest& s = out.scheduled[i];
    if (s.request == nullptr) continue;
    Request& r = *s.request;
    if (r.wants_prompt_logprobs()) {  // the scheduler gave every row of the chunk
      // Prompt logprobs: row j sits at position num_computed + j and predicts the token after it.
      pending[i].prompt_begin = r.next_prompt_logprob;
      const float* chunk = host_rows(s.logits_begin, s.num_logits);
      for (int32_t j = 0; j < s.num_logits; ++j) {
        const int32_t target = r.num_computed_tokens + j + 1;
        if (target < r.next_prompt_logprob || target >= r.num_prompt_tokens) continue;
        pending[i].prompt_logprobs.push_back(token_logprob({chunk + static_cast<size_t>(j) * vocab, vocab},
                                                           r.tokens[static_cast<size_t>(target)],
                                                           *r.params.prompt_logprobs));
        r.next_prompt_logprob = target + 1;
      }
    }
    if (!s.sample || samples_on_device(r.params)) continue;  // device samples: below, only the ids come back
    const float* row = host_rows(s.logits_begin + s.num_logits - 1, 1);
    const std::span<const int32_t> all(r.tokens);
    sampled[i] = sample_next_token({row, vocab}, r.params, all.first(static_cast<size_t>(r.num_prompt_tokens)),
                                   all.subspan(static_cast<size_t>(r.num_prompt_tokens)), r.seed,
                                   static_cast<uint64_t>(r.num_output_tokens()), scratch);
    if (r.params.logprobs) pending[i].logprobs.push_back(token_logprob({row, vocab}, sampled[i], *r.params.logprobs));
  }
  DeviceSamples device;
  Status st = enqueue_samples(out, logits, device);
  if (st) st = backend->wait_samples();
  if (!st) return fail(out, st);
  for (size_t k = 0; k < device.owner.size(); ++k) sampled[device.owner[k]] = device.host_ids[k];
  count_prompt_tokens(out);
  scheduler->update(out, sampled);
  ++num_steps;
  emit_step(out, std::move(pending));
  return end_step();
}

void Engine::Impl::emit_step(const SchedulerOutput& out, std::vector<Pending> pending) {
  pending.resize(out.scheduled.size());
  const double t = now();
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    if (out.scheduled[i].request == nullptr) continue;
    Request& r = *out.scheduled[i].request;
    std::vector<int32_t> new_tokens;
    std::string text;
    if (out.scheduled[i].sample && sampled[i] >= 0) {
      new_tokens.push_back(sampled[i]);
      ++num_generated_tokens;
      if (r.first_token_time == 0.0) r.first_token_time = t;
      if (auto* stream = static_cast<TextStream*>(r.text_stream.get())) {
        bool stopped = false;
        text = stream->push(sampled[i], &stopped);
        if (stopped) {
          // A stop string completed: the request ends here whatever else the token did.
          if (!r.is_finished()) scheduler->finish_request(r.id, FinishReason::kStop);
          r.finish_reason = FinishReason::kStop;
        } else if (r.is_finished()) {
          text += stream->finish();
        }
      }
    }
    if (new_tokens.empty() && pending[i].prompt_logprobs.empty() && !r.is_finished()) continue;
    emit(r, std::move(new_tokens), std::move(pending[i].logprobs), std::move(pending[i].prompt_logprobs),
         pending[i].prompt_begin, {}, std::move(text));
  }
  events_cv.notify_all();
}

void Engine::Impl::refresh_stats() {
  const SchedulerStats s = scheduler->stats();
  EngineStats e;
  e.num_running = s.num_running;
  e.num_waiting = s.num_waiting;
  e.num_preemptions = s.num_preemptions;
  e.num_steps = num_steps;
  e.prefix_cache_queries = s.prefix_cache_queries;
  e.prefix_cache_hit_tokens = s.prefix_cache_hits;
  e.num_kv_blocks = s.num_blocks;
  e.num_free_kv_blocks = s.num_free_blocks;
  e.block_size = scheduler->config().block_size;
  e.kv_capacity_tokens = static_cast<int64_t>(s.num_blocks) * e.block_size;
  e.kv_usage = scheduler->block_manager().usage();
  e.weight_bytes = weight_bytes;
  // The processes of a multi-process group hold equal shares (same block count, same head counts per rank).
  const uint64_t processes = group ? static_cast<uint64_t>(group->size()) : 1;
  e.kv_cache_bytes = runner->kv_cache_bytes() * processes;
  e.workspace_bytes = runner->workspace_bytes() * processes;
  e.peak_device_bytes = 0;
  for (const auto& b : backends)
    e.peak_device_bytes = std::max<uint64_t>(e.peak_device_bytes, b->allocator().peak_bytes());
  e.num_prompt_tokens = num_prompt_tokens;
  e.num_generated_tokens = num_generated_tokens;
  std::lock_guard lock(mu);
  e.num_waiting += static_cast<int32_t>(inbox.size());
  last_stats = e;
}

std::vector<RequestEvent> Engine::poll() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  std::vector<RequestEvent> out(std::make_move_iterator(m.events.begin()), std::make_move_iterator(m.events.end()));
  m.events.clear();
  return out;
}

bool Engine::wait_for_events(int timeout_ms) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  return m.events_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !m.events.empty(); });
}

bool Engine::has_unfinished_requests() const {
  std::lock_guard lock(impl_->mu);
  return impl_->num_unfinished > 0 || !impl_->cancels.empty();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(impl_->mu);
  EngineStats s = impl_->last_stats;
  s.num_waiting = std::max<int32_t>(s.num_waiting, 0);
  return s;
}

const ModelInfo& Engine::model_info() const { return impl_->info; }

void Engine::Impl::run_loop() {
  while (true) {
    {
      std::unique_lock lock(mu);
      work_cv.wait(lock, [&] { return stop_requested || num_unfinished > 0 || !cancels.empty(); });
      if (stop_requested) return;
    }
    std::lock_guard step_lock(step_mu);
    (void)step();  // errors are reported per request through events
  }
}

Status Engine::start() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  if (m.loop_running) return Status::ok();
  m.stop_requested = false;
  m.loop_running = true;
  m.loop = std::thread([&m] { m.run_loop(); });
  return Status::ok();
}

void Engine::stop() {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.mu);
    if (!m.loop_running) return;
    m.stop_requested = true;
    m.work_cv.notify_all();
  }
  m.loop.join();
  std::lock_guard lock(m.mu);
  m.loop_running = false;
}

}  // namespace photon
