// The public Engine API: creation, submission, cancellation, events and the engine-owned loop. The step loop
// itself is in step.cpp; the state both share in engine_impl.hpp.
#include <pthread.h>

#include <photon/engine.hpp>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "core/logging.hpp"
#if defined(PHOTON_WITH_CUDA)
#include "cuda/cuda_allocator.hpp"
#endif
#include "engine/engine_impl.hpp"
#include "engine/model_setup.hpp"
#include "models/model_loader.hpp"
#include "models/tensor_parallel.hpp"

namespace photon {
namespace {

uint64_t mix_seed(uint64_t a, uint64_t b) { return a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull); }

}  // namespace

int cuda_device_count() {
#if defined(PHOTON_WITH_CUDA)
  return cuda::device_count();
#else
  return 0;
#endif
}

CudaDeviceProperties cuda_device_properties(int device) {
  CudaDeviceProperties p;
#if defined(PHOTON_WITH_CUDA)
  cuda::device_properties(device, &p.total_memory_bytes, &p.compute_capability);
#else
  (void)device;
#endif
  return p;
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
    if (path.empty() && !config.chat_template.empty()) {
      return Status(StatusCode::kInvalidArgument,
                    "a chat template needs a tokenizer: give the tokenizer folder (--tokenizer) too");
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
      if (!config.chat_template.empty() || fs::exists(dir / "tokenizer_config.json", ec)) {
        auto tmpl = ChatTemplate::load(dir.string(), config.chat_template);
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
      const Request& r = **it;
      RequestEvent e;
      e.request_id = id;
      e.finished = true;
      e.finish_reason = FinishReason::kCancelled;
      e.num_prompt_tokens = r.num_prompt_tokens;
      e.arrival_time = r.arrival_time;
      e.finish_time = m.now();
      m.inbox.erase(it);
      m.publish_locked(std::move(e));
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

void Engine::Impl::emit(const Request& r, RequestEvent e) {
  e.request_id = r.id;
  e.finished = r.is_finished();
  e.finish_reason = r.finish_reason;
  e.num_prompt_tokens = r.num_prompt_tokens;
  e.num_output_tokens = r.num_output_tokens();
  e.num_cached_prompt_tokens = r.num_cached_prompt_tokens;
  e.arrival_time = r.arrival_time;
  e.first_token_time = r.first_token_time;
  e.finish_time = e.finished ? now() : 0.0;
  if (e.finished) text_streams.erase(r.id);
  std::lock_guard lock(mu);
  publish_locked(std::move(e));
}

void Engine::Impl::publish_locked(RequestEvent e) {
  if (e.finished) {
    --num_unfinished;
    live.erase(e.request_id);
  }
  events.push_back(std::move(e));
  events_cv.notify_all();
}

Status Engine::step() {
  std::lock_guard step_lock(impl_->step_mu);
  return impl_->step();
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
  pthread_setname_np(pthread_self(), "photon-step");  // what top -H and debuggers show
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
