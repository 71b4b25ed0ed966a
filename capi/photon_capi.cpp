// The C ABI: a thin shim over the C++ Engine. Every entry point catches everything, so no exception crosses.
#include "photon.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>

#include <photon/engine.hpp>
#include <photon/log.hpp>
#include <photon/tokenizer.hpp>
#include <photon/version.hpp>

struct photon_engine {
  std::unique_ptr<photon::Engine> engine;
  std::mutex mu;  // guards last_error and the poll buffers
  std::string last_error;
  std::deque<photon::RequestEvent> pending;  // polled from the engine, not yet handed out
  // Storage behind the pointers of the last photon_poll, one entry per event handed out.
  struct Logprobs {
    std::vector<int32_t> token_ids;
    std::vector<float> logprobs, top_logprobs;
    std::vector<int32_t> top_ids;
    int32_t top_n = 0;
  };
  std::vector<photon::RequestEvent> handed_out;
  std::vector<Logprobs> logprobs, prompt_logprobs;
  // photon_engine_model_info's storage, filled once.
  std::once_flag info_once;
  std::vector<int32_t> eos_ids;
};

namespace {

thread_local std::string t_last_error;
thread_local std::string t_engine_error_copy;

// True when `field` lies inside the caller's struct (callers built against older, smaller structs).
#define PHOTON_HAS_FIELD(ptr, field) \
  (offsetof(std::remove_pointer_t<decltype(ptr)>, field) + sizeof((ptr)->field) <= (ptr)->struct_size)

photon_status to_c(photon::StatusCode code) { return static_cast<photon_status>(static_cast<int>(code)); }

// Records an error: on the engine when there is one, else for this thread (photon_last_error).
photon_status fail(photon_engine* e, photon_status code, std::string message) {
  if (e == nullptr) {
    t_last_error = std::move(message);
  } else {
    std::lock_guard lock(e->mu);
    e->last_error = std::move(message);
  }
  return code;
}
photon_status fail(photon_engine* e, const photon::Status& s) { return fail(e, to_c(s.code()), s.message()); }

// Helper 1: runs an entry point's body so that no exception crosses the boundary; errors land on `e` (or, with
// e == nullptr, on the thread). `needs_engine` entry points refuse a NULL engine.
template <typename F>
photon_status guarded(photon_engine* e, bool needs_engine, F&& f) {
  if (needs_engine && e == nullptr) return fail(nullptr, PHOTON_ERROR_INVALID_ARGUMENT, "engine is NULL");
  try {
    return f();
  } catch (const std::exception& ex) {
    return fail(e, PHOTON_ERROR_INTERNAL, ex.what());
  } catch (...) {
    return fail(e, PHOTON_ERROR_INTERNAL, "unknown exception");
  }
}
template <typename F>
photon_status guarded(photon_engine* e, F&& f) {
  return guarded(e, true, std::forward<F>(f));
}
// Entry points without an engine: errors go to photon_last_error.
template <typename F>
photon_status guarded_global(F&& f) {
  return guarded(nullptr, false, std::forward<F>(f));
}

// Helper 2: copies `src` into the caller's buffer of `capacity` elements, always reporting the size needed in
// *out_count; writes nothing and returns PHOTON_ERROR_BUFFER_TOO_SMALL when it does not fit.
template <typename Container, typename T>
photon_status copy_out(photon_engine* e, const Container& src, T* dst, size_t capacity, size_t* out_count,
                       const char* what) {
  *out_count = src.size();
  if (src.size() > capacity) {
    return fail(e, PHOTON_ERROR_BUFFER_TOO_SMALL,
                "the " + std::string(what) + " buffer holds " + std::to_string(capacity) + " but " +
                    std::to_string(src.size()) + " are needed");
  }
  std::copy(src.begin(), src.end(), dst);
  return PHOTON_OK;
}

// A struct the library fills: struct_size must reach the end of its first published layout (`first_layout`
// bytes). Returns the bytes to fill, or 0 after recording the error.
size_t fill_size(photon_engine* e, size_t struct_size, size_t first_layout, size_t ours, const char* name) {
  if (struct_size < first_layout) {
    fail(e, PHOTON_ERROR_INVALID_ARGUMENT,
         std::string(name) + "->struct_size is " + std::to_string(struct_size) + ", smaller than any " + name +
             " layout (at least " + std::to_string(first_layout) + "); set it to sizeof(" + name + ")");
    return 0;
  }
  return std::min(struct_size, ours);
}

// Copies the first `bytes` of `full` over *out and records them in out->struct_size.
template <typename T>
void fill(T* out, T full, size_t bytes) {
  full.struct_size = bytes;
  std::memcpy(out, &full, bytes);
}

// A parameter struct's defaults into the first `struct_size` bytes of *out (a binding's own, possibly older or
// newer, declaration); at least `first_field_end` bytes. Bytes past our layout are left alone.
template <typename T>
photon_status init_prefix(T* out, size_t struct_size, size_t first_field_end, T defaults, const char* name) {
  if (out == nullptr) return fail(nullptr, PHOTON_ERROR_INVALID_ARGUMENT, std::string(name) + " pointer is NULL");
  if (struct_size < first_field_end) {
    return fail(nullptr, PHOTON_ERROR_INVALID_ARGUMENT,
                "struct_size " + std::to_string(struct_size) + " is smaller than any " + name + " layout (at least " +
                    std::to_string(first_field_end) + ")");
  }
  fill(out, defaults, std::min(struct_size, sizeof(T)));
  out->struct_size = struct_size;
  return PHOTON_OK;
}

const char* or_default(const char* s, const char* fallback) { return s != nullptr ? s : fallback; }

// Flattens logprob records into the storage behind one event's arrays.
photon_engine::Logprobs flatten(const std::vector<photon::TokenLogprob>& records) {
  photon_engine::Logprobs out;
  if (records.empty()) return out;
  out.top_n = static_cast<int32_t>(records.front().top.size());
  for (const auto& lp : records) {
    out.token_ids.push_back(lp.token);
    out.logprobs.push_back(lp.logprob);
    for (int32_t k = 0; k < out.top_n; ++k) {
      const bool has = static_cast<size_t>(k) < lp.top.size();
      out.top_ids.push_back(has ? lp.top[static_cast<size_t>(k)].first : -1);
      out.top_logprobs.push_back(has ? lp.top[static_cast<size_t>(k)].second : 0.0f);
    }
  }
  return out;
}

}  // namespace

extern "C" {

int photon_version_major(void) { return PHOTON_VERSION_MAJOR; }
int photon_version_minor(void) { return PHOTON_VERSION_MINOR; }
int photon_version_patch(void) { return PHOTON_VERSION_PATCH; }
const char* photon_version_string(void) { return PHOTON_VERSION_STRING; }

const char* photon_status_string(photon_status status) {
  if (status == PHOTON_ERROR_BUFFER_TOO_SMALL) return "buffer too small";
  const int code = static_cast<int>(status);
  if (code < 0 || code > static_cast<int>(photon::StatusCode::kInternal)) return "unknown status";
  return photon::status_code_name(static_cast<photon::StatusCode>(code)).data();
}

const char* photon_last_error(void) { return t_last_error.c_str(); }

void photon_log_set(photon_log_callback callback, void* user_data) {
  try {
    if (callback == nullptr) {
      photon::set_log_sink({});
      return;
    }
    photon::set_log_sink([callback, user_data](photon::LogLevel level, std::string_view message) {
      const std::string text(message);  // NUL-terminated for C
      callback(static_cast<photon_log_level>(static_cast<int>(level)), text.c_str(), user_data);
    });
  } catch (...) {  // allocation failure: keep the previous sink
  }
}

void photon_log_set_level(photon_log_level level) {
  const int l = static_cast<int>(level);
  if (l < static_cast<int>(photon::LogLevel::kDebug) || l > static_cast<int>(photon::LogLevel::kOff)) return;
  photon::set_log_level(static_cast<photon::LogLevel>(l));
}

photon_engine_params photon_engine_params_default(void) {
  const photon::EngineConfig d;
  photon_engine_params p{};
  p.struct_size = sizeof(photon_engine_params);
  p.model = nullptr;
  p.load_format = "auto";
  p.device = "cpu";
  p.dtype = "bf16";
  p.kv_cache_dtype = "auto";
  p.kv_cache_memory_bytes = d.kv_cache_memory_bytes;
  p.memory_utilization = d.memory_utilization;
  p.num_kv_blocks = d.num_kv_blocks;
  p.block_size = d.block_size;
  p.max_num_seqs = d.max_num_seqs;
  p.max_num_batched_tokens = d.max_num_batched_tokens;
  p.max_model_len = d.max_model_len;
  p.enable_prefix_caching = d.enable_prefix_caching ? 1 : 0;
  p.seed = d.seed;
  p.tokenizer = nullptr;
  p.tensor_parallel_size = d.tensor_parallel_size;
  p.dist_init_addr = nullptr;
  p.rank = 0;
  p.enforce_eager = d.enforce_eager ? 1 : 0;
  p.async_scheduling = d.async_scheduling ? 1 : 0;
  p.peer_all_reduce = d.peer_all_reduce ? 1 : 0;
  p.load_progress = nullptr;
  p.load_progress_user_data = nullptr;
  p.quantization = "none";
  p.group_size = d.group_size;
  p.quantize_lm_head = d.quantize_lm_head ? 1 : 0;
  return p;
}

}  // extern "C"

namespace {

// The C parameters as an EngineConfig (fields past the caller's struct_size keep their defaults), or why not.
photon::Result<photon::EngineConfig> engine_config(const photon_engine_params* p) {
  using photon::Status, photon::StatusCode;
  if (p == nullptr)
    return Status(StatusCode::kInvalidArgument, "params is NULL; start from photon_engine_params_default()");
  if (!PHOTON_HAS_FIELD(p, model)) {
    return Status(StatusCode::kInvalidArgument,
                  "params->struct_size is too small; initialise the struct with photon_engine_params_default()");
  }
  if (p->model == nullptr) return Status(StatusCode::kInvalidArgument, "params->model is NULL");
  photon::EngineConfig c;
  c.model = p->model;
  if (PHOTON_HAS_FIELD(p, load_format)) c.load_format = or_default(p->load_format, "auto");
  if (PHOTON_HAS_FIELD(p, device)) c.device = or_default(p->device, "cpu");
  if (PHOTON_HAS_FIELD(p, dtype)) c.dtype = or_default(p->dtype, "bf16");
  if (PHOTON_HAS_FIELD(p, kv_cache_dtype)) c.kv_cache_dtype = or_default(p->kv_cache_dtype, "auto");
  if (PHOTON_HAS_FIELD(p, kv_cache_memory_bytes)) c.kv_cache_memory_bytes = p->kv_cache_memory_bytes;
  if (PHOTON_HAS_FIELD(p, memory_utilization)) c.memory_utilization = p->memory_utilization;
  if (PHOTON_HAS_FIELD(p, num_kv_blocks)) c.num_kv_blocks = p->num_kv_blocks;
  if (PHOTON_HAS_FIELD(p, block_size)) c.block_size = p->block_size;
  if (PHOTON_HAS_FIELD(p, max_num_seqs)) c.max_num_seqs = p->max_num_seqs;
  if (PHOTON_HAS_FIELD(p, max_num_batched_tokens)) c.max_num_batched_tokens = p->max_num_batched_tokens;
  if (PHOTON_HAS_FIELD(p, max_model_len)) c.max_model_len = p->max_model_len;
  if (PHOTON_HAS_FIELD(p, enable_prefix_caching)) c.enable_prefix_caching = p->enable_prefix_caching != 0;
  if (PHOTON_HAS_FIELD(p, seed)) c.seed = p->seed;
  if (PHOTON_HAS_FIELD(p, tokenizer) && p->tokenizer != nullptr) c.tokenizer = p->tokenizer;
  if (PHOTON_HAS_FIELD(p, tensor_parallel_size)) c.tensor_parallel_size = p->tensor_parallel_size;
  if (PHOTON_HAS_FIELD(p, dist_init_addr) && p->dist_init_addr != nullptr) c.dist_init_addr = p->dist_init_addr;
  if (PHOTON_HAS_FIELD(p, rank)) c.rank = p->rank;
  if (PHOTON_HAS_FIELD(p, enforce_eager)) c.enforce_eager = p->enforce_eager != 0;
  if (PHOTON_HAS_FIELD(p, async_scheduling)) c.async_scheduling = p->async_scheduling != 0;
  if (PHOTON_HAS_FIELD(p, peer_all_reduce)) c.peer_all_reduce = p->peer_all_reduce != 0;
  if (PHOTON_HAS_FIELD(p, quantization)) c.quantization = or_default(p->quantization, "none");
  if (PHOTON_HAS_FIELD(p, group_size)) c.group_size = p->group_size;
  if (PHOTON_HAS_FIELD(p, quantize_lm_head)) c.quantize_lm_head = p->quantize_lm_head != 0;
  if (PHOTON_HAS_FIELD(p, load_progress_user_data) && p->load_progress != nullptr) {
    c.load_progress = [f = p->load_progress, user = p->load_progress_user_data](uint64_t done, uint64_t total) {
      f(done, total, user);
    };
  }
  return c;
}

// The C parameters as photon::SamplingParams (fields past the caller's struct_size keep their defaults; NULL: all
// defaults).
photon::Result<photon::SamplingParams> to_cpp(const photon_sampling_params* p) {
  using photon::Status, photon::StatusCode;
  photon::SamplingParams s;
  if (p == nullptr) return s;
  if (!PHOTON_HAS_FIELD(p, temperature)) {
    return Status(StatusCode::kInvalidArgument,
                  "sampling params struct_size is too small; initialise the struct with "
                  "photon_sampling_params_default()");
  }
  s.temperature = p->temperature;
  if (PHOTON_HAS_FIELD(p, top_k)) s.top_k = p->top_k;
  if (PHOTON_HAS_FIELD(p, top_p)) s.top_p = p->top_p;
  if (PHOTON_HAS_FIELD(p, min_p)) s.min_p = p->min_p;
  if (PHOTON_HAS_FIELD(p, repetition_penalty)) s.repetition_penalty = p->repetition_penalty;
  if (PHOTON_HAS_FIELD(p, presence_penalty)) s.presence_penalty = p->presence_penalty;
  if (PHOTON_HAS_FIELD(p, frequency_penalty)) s.frequency_penalty = p->frequency_penalty;
  if (PHOTON_HAS_FIELD(p, max_tokens)) s.max_tokens = p->max_tokens;
  if (PHOTON_HAS_FIELD(p, seed) && p->has_seed) s.seed = p->seed;
  if (PHOTON_HAS_FIELD(p, ignore_eos)) s.ignore_eos = p->ignore_eos != 0;
  if (PHOTON_HAS_FIELD(p, num_stop_token_ids) && p->num_stop_token_ids > 0) {
    if (p->stop_token_ids == nullptr) return Status(StatusCode::kInvalidArgument, "stop_token_ids is NULL");
    s.stop_token_ids.assign(p->stop_token_ids, p->stop_token_ids + p->num_stop_token_ids);
  }
  if (PHOTON_HAS_FIELD(p, logprobs) && p->logprobs >= 0) s.logprobs = p->logprobs;
  if (PHOTON_HAS_FIELD(p, prompt_logprobs) && p->prompt_logprobs >= 0) s.prompt_logprobs = p->prompt_logprobs;
  if (PHOTON_HAS_FIELD(p, priority)) s.priority = p->priority;
  if (PHOTON_HAS_FIELD(p, num_stop) && p->num_stop > 0) {
    if (p->stop == nullptr) return Status(StatusCode::kInvalidArgument, "stop is NULL");
    for (size_t i = 0; i < p->num_stop; ++i) {
      if (p->stop[i] == nullptr) return Status(StatusCode::kInvalidArgument, "a stop string is NULL");
      s.stop.emplace_back(p->stop[i]);
    }
  }
  if (PHOTON_HAS_FIELD(p, num_logit_bias) && p->num_logit_bias > 0) {
    if (p->logit_bias_ids == nullptr || p->logit_bias_values == nullptr) {
      return Status(StatusCode::kInvalidArgument, "logit_bias_ids or logit_bias_values is NULL");
    }
    for (size_t i = 0; i < p->num_logit_bias; ++i)
      s.logit_bias.emplace_back(p->logit_bias_ids[i], p->logit_bias_values[i]);
  }
  return s;
}

// Submits through `submit(params)` (a call of one of the Engine::submit functions) after converting the params.
template <typename F>
photon_status submit_with(photon_engine* engine, const photon_sampling_params* p, uint64_t* out_id, F&& submit) {
  if (out_id == nullptr) return fail(engine, PHOTON_ERROR_INVALID_ARGUMENT, "out_request_id is NULL");
  auto s = to_cpp(p);
  if (!s) return fail(engine, s.status());
  auto id = submit(*s);
  if (!id) return fail(engine, id.status());
  *out_id = *id;
  return PHOTON_OK;
}

photon_status from_status(photon_engine* engine, const photon::Status& s) {
  return s.is_ok() ? PHOTON_OK : fail(engine, s);
}

}  // namespace

extern "C" {

photon_status photon_run_tensor_parallel_worker(const photon_engine_params* p) {
  return guarded_global([&]() -> photon_status {
    auto config = engine_config(p);
    if (!config) return fail(nullptr, config.status());
    const photon::Status s = photon::run_tensor_parallel_worker(*config);
    if (!s.is_ok()) return fail(nullptr, s);
    t_last_error.clear();
    return PHOTON_OK;
  });
}

photon_status photon_engine_create(const photon_engine_params* p, photon_engine** out) {
  if (out == nullptr) return fail(nullptr, PHOTON_ERROR_INVALID_ARGUMENT, "out_engine is NULL");
  *out = nullptr;
  return guarded_global([&]() -> photon_status {
    auto config = engine_config(p);
    if (!config) return fail(nullptr, config.status());
    auto engine = photon::Engine::create(*config);
    if (!engine) return fail(nullptr, engine.status());
    auto* handle = new photon_engine();
    handle->engine = std::move(*engine);
    *out = handle;
    t_last_error.clear();
    return PHOTON_OK;
  });
}

void photon_engine_destroy(photon_engine* engine) {
  try {
    delete engine;
  } catch (...) {  // destructors do not throw; this only keeps the promise that nothing crosses
  }
}

const char* photon_engine_last_error(const photon_engine* engine) {
  if (engine == nullptr) return "engine is NULL";
  auto* e = const_cast<photon_engine*>(engine);
  std::lock_guard lock(e->mu);
  t_engine_error_copy = e->last_error;
  return t_engine_error_copy.c_str();
}

int64_t photon_engine_vocab_size(const photon_engine* engine) {
  return engine == nullptr ? 0 : engine->engine->model_info().vocab_size;
}

int32_t photon_engine_max_model_len(const photon_engine* engine) {
  return engine == nullptr ? 0 : engine->engine->model_info().max_model_len;
}

photon_status photon_engine_model_info(const photon_engine* engine, photon_model_info* out) {
  auto* e = const_cast<photon_engine*>(engine);
  return guarded(e, [&]() -> photon_status {
    if (out == nullptr) return fail(e, PHOTON_ERROR_INVALID_ARGUMENT, "out is NULL");
    const size_t bytes =
        fill_size(e, out->struct_size, sizeof(photon_model_info), sizeof(photon_model_info), "photon_model_info");
    if (bytes == 0) return PHOTON_ERROR_INVALID_ARGUMENT;
    const photon::ModelInfo& m = e->engine->model_info();
    std::call_once(e->info_once, [&] { e->eos_ids = m.eos_token_ids; });
    photon_model_info full{};
    full.architecture = m.architecture.c_str();
    full.vocab_size = m.vocab_size;
    full.max_model_len = m.max_model_len;
    full.bos_token_id = m.bos_token_id.value_or(-1);
    full.eos_token_ids = e->eos_ids.data();
    full.num_eos_token_ids = e->eos_ids.size();
    full.device = m.device.c_str();
    full.device_description = m.device_description.c_str();
    fill(out, full, bytes);
    return PHOTON_OK;
  });
}

const photon_tokenizer* photon_engine_tokenizer(const photon_engine* engine) {
  if (engine == nullptr) return nullptr;
  return reinterpret_cast<const photon_tokenizer*>(engine->engine->tokenizer());
}

photon_sampling_params photon_sampling_params_default(void) {
  const photon::SamplingParams d;
  photon_sampling_params p{};
  p.struct_size = sizeof(photon_sampling_params);
  p.temperature = d.temperature;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  p.repetition_penalty = d.repetition_penalty;
  p.presence_penalty = d.presence_penalty;
  p.frequency_penalty = d.frequency_penalty;
  p.max_tokens = d.max_tokens;
  p.has_seed = 0;
  p.seed = 0;
  p.ignore_eos = 0;
  p.stop_token_ids = nullptr;
  p.num_stop_token_ids = 0;
  p.logprobs = -1;
  p.prompt_logprobs = -1;
  p.priority = 0;
  p.stop = nullptr;
  p.num_stop = 0;
  p.logit_bias_ids = nullptr;
  p.logit_bias_values = nullptr;
  p.num_logit_bias = 0;
  return p;
}

photon_status photon_engine_params_init(photon_engine_params* params, size_t struct_size) {
  return init_prefix(params, struct_size, offsetof(photon_engine_params, model) + sizeof(params->model),
                     photon_engine_params_default(), "photon_engine_params");
}

photon_status photon_sampling_params_init(photon_sampling_params* params, size_t struct_size) {
  return init_prefix(params, struct_size, offsetof(photon_sampling_params, temperature) + sizeof(params->temperature),
                     photon_sampling_params_default(), "photon_sampling_params");
}

photon_status photon_submit(photon_engine* engine, const int32_t* prompt, size_t n, const photon_sampling_params* p,
                            uint64_t* out_id) {
  return guarded(engine, [&]() -> photon_status {
    if (prompt == nullptr && n > 0) return fail(engine, PHOTON_ERROR_INVALID_ARGUMENT, "prompt is NULL");
    return submit_with(engine, p, out_id, [&](const photon::SamplingParams& s) {
      return engine->engine->submit(std::vector<int32_t>(prompt, prompt + n), s);
    });
  });
}

photon_status photon_submit_text(photon_engine* engine, const char* prompt, const photon_sampling_params* p,
                                 uint64_t* out_id) {
  return guarded(engine, [&]() -> photon_status {
    if (prompt == nullptr) return fail(engine, PHOTON_ERROR_INVALID_ARGUMENT, "prompt is NULL");
    return submit_with(engine, p, out_id,
                       [&](const photon::SamplingParams& s) { return engine->engine->submit_text(prompt, s); });
  });
}

photon_status photon_submit_chat(photon_engine* engine, const char* messages_json, const char* tools_json,
                                 const char* extra_json, const photon_sampling_params* p, uint64_t* out_id) {
  return guarded(engine, [&]() -> photon_status {
    if (messages_json == nullptr) return fail(engine, PHOTON_ERROR_INVALID_ARGUMENT, "messages_json is NULL");
    photon::ChatTemplate::Options options;
    options.add_generation_prompt = true;
    if (extra_json != nullptr) options.extra_json = extra_json;
    return submit_with(engine, p, out_id, [&](const photon::SamplingParams& s) {
      return engine->engine->submit_chat(messages_json, s, options, or_default(tools_json, ""));
    });
  });
}

photon_status photon_render_chat(photon_engine* engine, const char* messages_json, const char* tools_json,
                                 const char* extra_json, int add_generation_prompt, char* text, size_t capacity,
                                 size_t* out_len) {
  return guarded(engine, [&]() -> photon_status {
    if (messages_json == nullptr || out_len == nullptr || (text == nullptr && capacity > 0)) {
      return fail(engine, PHOTON_ERROR_INVALID_ARGUMENT, "messages_json, text or out_len is NULL");
    }
    const photon::ChatTemplate* tmpl = engine->engine->chat_template();
    if (tmpl == nullptr) return fail(engine, PHOTON_ERROR_UNSUPPORTED, "this engine has no chat template");
    photon::ChatTemplate::Options options;
    options.add_generation_prompt = add_generation_prompt != 0;
    if (extra_json != nullptr) options.extra_json = extra_json;
    auto out = tmpl->render(messages_json, or_default(tools_json, ""), options);
    if (!out) return fail(engine, out.status());
    return copy_out(engine, *out, text, capacity, out_len, "text (bytes)");
  });
}

photon_status photon_cancel(photon_engine* engine, uint64_t id) {
  return guarded(engine, [&] { return from_status(engine, engine->engine->cancel(id)); });
}

photon_status photon_step(photon_engine* engine) {
  return guarded(engine, [&] { return from_status(engine, engine->engine->step()); });
}

int photon_has_unfinished(photon_engine* engine) {
  if (engine == nullptr) return 0;
  try {
    std::lock_guard lock(engine->mu);
    return engine->engine->has_unfinished_requests() || !engine->pending.empty() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

int photon_wait_for_events(photon_engine* engine, int timeout_ms) {
  if (engine == nullptr) return 0;
  try {
    {
      std::lock_guard lock(engine->mu);
      if (!engine->pending.empty()) return 1;
    }
    return engine->engine->wait_for_events(std::max(0, timeout_ms)) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

photon_status photon_start(photon_engine* engine) {
  return guarded(engine, [&] { return from_status(engine, engine->engine->start()); });
}

void photon_stop(photon_engine* engine) {
  if (engine == nullptr) return;
  try {
    engine->engine->stop();
  } catch (...) {
  }
}

photon_status photon_poll(photon_engine* engine, photon_event* events, size_t capacity, size_t* out_count) {
  return guarded(engine, [&]() -> photon_status {
    if (out_count == nullptr) return fail(engine, PHOTON_ERROR_INVALID_ARGUMENT, "out_count is NULL");
    if (events == nullptr && capacity > 0) return fail(engine, PHOTON_ERROR_INVALID_ARGUMENT, "events is NULL");
    std::lock_guard lock(engine->mu);
    for (auto& e : engine->engine->poll()) engine->pending.push_back(std::move(e));
    const size_t n = std::min(capacity, engine->pending.size());
    const auto end = engine->pending.begin() + static_cast<std::ptrdiff_t>(n);
    engine->handed_out.assign(std::make_move_iterator(engine->pending.begin()), std::make_move_iterator(end));
    engine->pending.erase(engine->pending.begin(), end);
    engine->logprobs.clear();
    engine->prompt_logprobs.clear();
    for (size_t i = 0; i < n; ++i) {
      const photon::RequestEvent& e = engine->handed_out[i];
      const photon_engine::Logprobs& lp = engine->logprobs.emplace_back(flatten(e.logprobs));
      engine->prompt_logprobs.push_back(flatten(e.prompt_logprobs));
      photon_event& c = events[i];
      c = photon_event{};
      c.request_id = e.request_id;
      c.token_ids = e.token_ids.data();
      c.num_tokens = e.token_ids.size();
      if (!e.logprobs.empty()) {
        c.logprobs = lp.logprobs.data();
        c.top_n = lp.top_n;
        c.top_ids = lp.top_n > 0 ? lp.top_ids.data() : nullptr;
        c.top_logprobs = lp.top_n > 0 ? lp.top_logprobs.data() : nullptr;
      }
      c.finished = e.finished ? 1 : 0;
      c.finish_reason = static_cast<photon_finish_reason>(static_cast<int>(e.finish_reason));
      c.error = e.error.c_str();
      c.num_prompt_tokens = e.num_prompt_tokens;
      c.num_output_tokens = e.num_output_tokens;
      c.num_cached_prompt_tokens = e.num_cached_prompt_tokens;
      c.arrival_time = e.arrival_time;
      c.first_token_time = e.first_token_time;
      c.finish_time = e.finish_time;
      c.text = e.text.c_str();
      c.text_len = e.text.size();
    }
    *out_count = n;
    return PHOTON_OK;
  });
}

photon_status photon_event_prompt_logprobs(photon_engine* engine, size_t index, photon_prompt_logprobs* out) {
  return guarded(engine, [&]() -> photon_status {
    if (out == nullptr) return fail(engine, PHOTON_ERROR_INVALID_ARGUMENT, "out is NULL");
    const size_t bytes = fill_size(engine, out->struct_size, sizeof(photon_prompt_logprobs),
                                   sizeof(photon_prompt_logprobs), "photon_prompt_logprobs");
    if (bytes == 0) return PHOTON_ERROR_INVALID_ARGUMENT;
    std::unique_lock lock(engine->mu);
    if (index >= engine->handed_out.size()) {
      const size_t count = engine->handed_out.size();
      lock.unlock();  // fail() takes the lock itself
      return fail(
          engine, PHOTON_ERROR_INVALID_ARGUMENT,
          "the last photon_poll returned " + std::to_string(count) + " events, not " + std::to_string(index + 1));
    }
    const photon_engine::Logprobs& lp = engine->prompt_logprobs[index];
    photon_prompt_logprobs full{};
    full.begin = engine->handed_out[index].prompt_logprobs_begin;
    full.count = lp.logprobs.size();
    full.token_ids = full.count > 0 ? lp.token_ids.data() : nullptr;
    full.logprobs = full.count > 0 ? lp.logprobs.data() : nullptr;
    full.top_n = lp.top_n;
    full.top_ids = lp.top_n > 0 ? lp.top_ids.data() : nullptr;
    full.top_logprobs = lp.top_n > 0 ? lp.top_logprobs.data() : nullptr;
    fill(out, full, bytes);
    return PHOTON_OK;
  });
}

photon_status photon_get_stats(photon_engine* engine, photon_stats* out) {
  return guarded(engine, [&]() -> photon_status {
    if (out == nullptr) return fail(engine, PHOTON_ERROR_INVALID_ARGUMENT, "out is NULL");
    const size_t bytes =
        fill_size(engine, out->struct_size, offsetof(photon_stats, num_generated_tokens) + sizeof(int64_t),
                  sizeof(photon_stats), "photon_stats");
    if (bytes == 0) return PHOTON_ERROR_INVALID_ARGUMENT;
    const photon::EngineStats s = engine->engine->stats();
    photon_stats full{};
    full.num_running = s.num_running;
    full.num_waiting = s.num_waiting;
    full.num_preemptions = s.num_preemptions;
    full.num_steps = s.num_steps;
    full.prefix_cache_hit_tokens = s.prefix_cache_hit_tokens;
    full.num_kv_blocks = s.num_kv_blocks;
    full.num_free_kv_blocks = s.num_free_kv_blocks;
    full.kv_capacity_tokens = s.kv_capacity_tokens;
    full.kv_usage = s.kv_usage;
    full.weight_bytes = s.weight_bytes;
    full.kv_cache_bytes = s.kv_cache_bytes;
    full.num_generated_tokens = s.num_generated_tokens;
    full.prefix_cache_queries = s.prefix_cache_queries;
    full.num_prompt_tokens = s.num_prompt_tokens;
    full.block_size = s.block_size;
    full.workspace_bytes = s.workspace_bytes;
    full.peak_device_bytes = s.peak_device_bytes;
    fill(out, full, bytes);
    return PHOTON_OK;
  });
}

photon_status photon_tokenizer_load(const char* path, photon_tokenizer** out) {
  if (out == nullptr) return fail(nullptr, PHOTON_ERROR_INVALID_ARGUMENT, "out_tokenizer is NULL");
  *out = nullptr;
  if (path == nullptr) return fail(nullptr, PHOTON_ERROR_INVALID_ARGUMENT, "path is NULL");
  return guarded_global([&]() -> photon_status {
    auto tok = photon::Tokenizer::load(path);
    if (!tok) return fail(nullptr, tok.status());
    *out = reinterpret_cast<photon_tokenizer*>(tok->release());
    return PHOTON_OK;
  });
}

void photon_tokenizer_destroy(photon_tokenizer* tokenizer) { delete reinterpret_cast<photon::Tokenizer*>(tokenizer); }

photon_status photon_tokenizer_encode(const photon_tokenizer* tokenizer, const char* text, size_t text_len,
                                      int add_special_tokens, int32_t* ids, size_t capacity, size_t* out_count) {
  if (tokenizer == nullptr || out_count == nullptr || (text == nullptr && text_len > 0) ||
      (ids == nullptr && capacity > 0)) {
    return fail(nullptr, PHOTON_ERROR_INVALID_ARGUMENT, "tokenizer, text, ids or out_count is NULL");
  }
  return guarded_global([&]() -> photon_status {
    const auto* tok = reinterpret_cast<const photon::Tokenizer*>(tokenizer);
    const auto out = tok->encode(std::string_view(or_default(text, ""), text_len), add_special_tokens != 0);
    return copy_out(nullptr, out, ids, capacity, out_count, "ids");
  });
}

photon_status photon_tokenizer_decode(const photon_tokenizer* tokenizer, const int32_t* ids, size_t num_ids,
                                      int skip_special_tokens, char* text, size_t capacity, size_t* out_len) {
  if (tokenizer == nullptr || out_len == nullptr || (ids == nullptr && num_ids > 0) ||
      (text == nullptr && capacity > 0)) {
    return fail(nullptr, PHOTON_ERROR_INVALID_ARGUMENT, "tokenizer, ids, text or out_len is NULL");
  }
  return guarded_global([&]() -> photon_status {
    const auto* tok = reinterpret_cast<const photon::Tokenizer*>(tokenizer);
    auto out = tok->decode(std::span<const int32_t>(ids, num_ids), skip_special_tokens != 0);
    if (!out) return fail(nullptr, out.status());
    return copy_out(nullptr, *out, text, capacity, out_len, "text (bytes)");
  });
}

}  // extern "C"
