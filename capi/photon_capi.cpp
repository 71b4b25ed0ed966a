// The C ABI: a thin shim over the C++ Engine. Every entry point catches everything, so no exception crosses.
#include "photon.h"

#include <cstddef>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>

#include <photon/engine.hpp>
#include <photon/tokenizer.hpp>
#include <photon/version.hpp>

struct photon_engine {
  std::unique_ptr<photon::Engine> engine;
  std::mutex mu;  // guards last_error and the poll buffers
  std::string last_error;
  std::deque<photon::RequestEvent> pending;  // polled from the engine, not yet handed out
  // Storage behind the pointers of the last photon_poll.
  std::vector<photon::RequestEvent> handed_out;
  std::vector<std::vector<float>> logprobs, top_logprobs;
  std::vector<std::vector<int32_t>> top_ids;
};

namespace {

thread_local std::string t_last_error;
thread_local std::string t_engine_error_copy;

// True when `field` lies inside the caller's struct (callers built against older, smaller structs).
#define PHOTON_HAS_FIELD(ptr, field) \
  (offsetof(std::remove_pointer_t<decltype(ptr)>, field) + sizeof((ptr)->field) <= (ptr)->struct_size)

photon_status to_c(photon::StatusCode code) { return static_cast<photon_status>(static_cast<int>(code)); }

photon_status fail(photon_engine* e, const photon::Status& s) {
  std::lock_guard lock(e->mu);
  e->last_error = s.message();
  return to_c(s.code());
}

photon_status fail_global(photon_status code, std::string message) {
  t_last_error = std::move(message);
  return code;
}

template <typename F>
photon_status guarded(photon_engine* e, F&& f) {
  if (e == nullptr) return fail_global(PHOTON_ERROR_INVALID_ARGUMENT, "engine is NULL");
  try {
    return f();
  } catch (const std::exception& ex) {
    return fail(e, photon::Status(photon::StatusCode::kInternal, ex.what()));
  } catch (...) {
    return fail(e, photon::Status(photon::StatusCode::kInternal, "unknown exception"));
  }
}

const char* or_default(const char* s, const char* fallback) { return s != nullptr ? s : fallback; }

}  // namespace

extern "C" {

int photon_version_major(void) { return PHOTON_VERSION_MAJOR; }
int photon_version_minor(void) { return PHOTON_VERSION_MINOR; }
int photon_version_patch(void) { return PHOTON_VERSION_PATCH; }
const char* photon_version_string(void) { return PHOTON_VERSION_STRING; }

const char* photon_status_string(photon_status status) {
  const int code = static_cast<int>(status);
  if (code < 0 || code > static_cast<int>(photon::StatusCode::kInternal)) return "unknown status";
  return photon::status_code_name(static_cast<photon::StatusCode>(code)).data();
}

const char* photon_last_error(void) { return t_last_error.c_str(); }

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
  return p;
}

namespace {

// The C parameters as an EngineConfig (fields past the caller's struct_size keep their defaults); the caller has
// checked that p and p->model are set.
photon::EngineConfig engine_config(const photon_engine_params* p) {
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
  return c;
}

// NULL params, a struct_size that does not reach `model`, or no model: the message says what to do.
const char* params_problem(const photon_engine_params* p) {
  if (p == nullptr) return "params is NULL; start from photon_engine_params_default()";
  if (p->struct_size < offsetof(photon_engine_params, model) + sizeof(p->model)) {
    return "params->struct_size is too small; initialise the struct with photon_engine_params_default()";
  }
  if (p->model == nullptr) return "params->model is NULL";
  return nullptr;
}

}  // namespace

photon_status photon_run_tensor_parallel_worker(const photon_engine_params* p) {
  if (const char* problem = params_problem(p)) return fail_global(PHOTON_ERROR_INVALID_ARGUMENT, problem);
  try {
    const photon::Status s = photon::run_tensor_parallel_worker(engine_config(p));
    if (!s.is_ok()) return fail_global(to_c(s.code()), s.message());
    t_last_error.clear();
    return PHOTON_OK;
  } catch (const std::exception& ex) {
    return fail_global(PHOTON_ERROR_INTERNAL, ex.what());
  } catch (...) {
    return fail_global(PHOTON_ERROR_INTERNAL, "unknown exception");
  }
}

photon_status photon_engine_create(const photon_engine_params* p, photon_engine** out) {
  if (out == nullptr) return fail_global(PHOTON_ERROR_INVALID_ARGUMENT, "out_engine is NULL");
  *out = nullptr;
  if (const char* problem = params_problem(p)) return fail_global(PHOTON_ERROR_INVALID_ARGUMENT, problem);
  try {
    auto engine = photon::Engine::create(engine_config(p));
    if (!engine) return fail_global(to_c(engine.status().code()), engine.status().message());
    auto* handle = new photon_engine();
    handle->engine = std::move(*engine);
    *out = handle;
    t_last_error.clear();
    return PHOTON_OK;
  } catch (const std::exception& ex) {
    return fail_global(PHOTON_ERROR_INTERNAL, ex.what());
  } catch (...) {
    return fail_global(PHOTON_ERROR_INTERNAL, "unknown exception");
  }
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
  return p;
}

}  // extern "C"

namespace {

// The C parameters as photon::SamplingParams (fields past the caller's struct_size keep their defaults).
photon::Result<photon::SamplingParams> to_cpp(const photon_sampling_params* p) {
  photon::SamplingParams s;
  if (p != nullptr) {
    if (PHOTON_HAS_FIELD(p, temperature)) s.temperature = p->temperature;
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
      if (p->stop_token_ids == nullptr) {
        return photon::Status(photon::StatusCode::kInvalidArgument, "stop_token_ids is NULL");
      }
      s.stop_token_ids.assign(p->stop_token_ids, p->stop_token_ids + p->num_stop_token_ids);
    }
    if (PHOTON_HAS_FIELD(p, logprobs) && p->logprobs >= 0) s.logprobs = p->logprobs;
    if (PHOTON_HAS_FIELD(p, prompt_logprobs) && p->prompt_logprobs >= 0) s.prompt_logprobs = p->prompt_logprobs;
    if (PHOTON_HAS_FIELD(p, priority)) s.priority = p->priority;
    if (PHOTON_HAS_FIELD(p, num_stop) && p->num_stop > 0) {
      if (p->stop == nullptr) return photon::Status(photon::StatusCode::kInvalidArgument, "stop is NULL");
      for (size_t i = 0; i < p->num_stop; ++i) {
        if (p->stop[i] == nullptr) return photon::Status(photon::StatusCode::kInvalidArgument, "a stop string is NULL");
        s.stop.emplace_back(p->stop[i]);
      }
    }
  }
  return s;
}

}  // namespace

extern "C" {

photon_status photon_submit(photon_engine* engine, const int32_t* prompt, size_t n, const photon_sampling_params* p,
                            uint64_t* out_id) {
  return guarded(engine, [&]() -> photon_status {
    if (prompt == nullptr && n > 0) return fail(engine, {photon::StatusCode::kInvalidArgument, "prompt is NULL"});
    if (out_id == nullptr) return fail(engine, {photon::StatusCode::kInvalidArgument, "out_request_id is NULL"});
    auto s = to_cpp(p);
    if (!s) return fail(engine, s.status());
    auto id = engine->engine->submit(std::vector<int32_t>(prompt, prompt + n), *s);
    if (!id) return fail(engine, id.status());
    *out_id = *id;
    return PHOTON_OK;
  });
}

photon_status photon_submit_text(photon_engine* engine, const char* prompt, const photon_sampling_params* p,
                                 uint64_t* out_id) {
  return guarded(engine, [&]() -> photon_status {
    if (prompt == nullptr) return fail(engine, {photon::StatusCode::kInvalidArgument, "prompt is NULL"});
    if (out_id == nullptr) return fail(engine, {photon::StatusCode::kInvalidArgument, "out_request_id is NULL"});
    auto s = to_cpp(p);
    if (!s) return fail(engine, s.status());
    auto id = engine->engine->submit_text(prompt, *s);
    if (!id) return fail(engine, id.status());
    *out_id = *id;
    return PHOTON_OK;
  });
}

photon_status photon_submit_chat(photon_engine* engine, const char* messages_json, const char* tools_json,
                                 const char* extra_json, const photon_sampling_params* p, uint64_t* out_id) {
  return guarded(engine, [&]() -> photon_status {
    if (messages_json == nullptr || out_id == nullptr) {
      return fail(engine, {photon::StatusCode::kInvalidArgument, "messages_json or out_request_id is NULL"});
    }
    auto s = to_cpp(p);
    if (!s) return fail(engine, s.status());
    photon::ChatTemplate::Options options;
    options.add_generation_prompt = true;
    if (extra_json != nullptr) options.extra_json = extra_json;
    auto id = engine->engine->submit_chat(messages_json, *s, options, tools_json == nullptr ? "" : tools_json);
    if (!id) return fail(engine, id.status());
    *out_id = *id;
    return PHOTON_OK;
  });
}

photon_status photon_render_chat(photon_engine* engine, const char* messages_json, const char* tools_json,
                                 const char* extra_json, int add_generation_prompt, char* text, size_t capacity,
                                 size_t* out_len) {
  return guarded(engine, [&]() -> photon_status {
    if (messages_json == nullptr || out_len == nullptr || (text == nullptr && capacity > 0)) {
      return fail(engine, {photon::StatusCode::kInvalidArgument, "messages_json, text or out_len is NULL"});
    }
    const photon::ChatTemplate* tmpl = engine->engine->chat_template();
    if (tmpl == nullptr) {
      return fail(engine, {photon::StatusCode::kUnsupported, "this engine has no chat template"});
    }
    photon::ChatTemplate::Options options;
    options.add_generation_prompt = add_generation_prompt != 0;
    if (extra_json != nullptr) options.extra_json = extra_json;
    auto out = tmpl->render(messages_json, tools_json == nullptr ? "" : tools_json, options);
    if (!out) return fail(engine, out.status());
    *out_len = out->size();
    if (out->size() > capacity) {
      return fail(engine, {photon::StatusCode::kResourceExhausted, "the text buffer holds " + std::to_string(capacity) +
                                                                       " bytes but " + std::to_string(out->size()) +
                                                                       " are needed"});
    }
    std::copy(out->begin(), out->end(), text);
    return PHOTON_OK;
  });
}

photon_status photon_cancel(photon_engine* engine, uint64_t id) {
  return guarded(engine, [&]() -> photon_status {
    const photon::Status s = engine->engine->cancel(id);
    return s ? PHOTON_OK : fail(engine, s);
  });
}

photon_status photon_step(photon_engine* engine) {
  return guarded(engine, [&]() -> photon_status {
    const photon::Status s = engine->engine->step();
    return s ? PHOTON_OK : fail(engine, s);
  });
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

photon_status photon_start(photon_engine* engine) {
  return guarded(engine, [&]() -> photon_status {
    const photon::Status s = engine->engine->start();
    return s ? PHOTON_OK : fail(engine, s);
  });
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
    if (out_count == nullptr) return fail(engine, {photon::StatusCode::kInvalidArgument, "out_count is NULL"});
    if (events == nullptr && capacity > 0) {
      return fail(engine, {photon::StatusCode::kInvalidArgument, "events is NULL"});
    }
    std::lock_guard lock(engine->mu);
    for (auto& e : engine->engine->poll()) engine->pending.push_back(std::move(e));
    const size_t n = std::min(capacity, engine->pending.size());
    engine->handed_out.assign(std::make_move_iterator(engine->pending.begin()),
                              std::make_move_iterator(engine->pending.begin() + static_cast<std::ptrdiff_t>(n)));
    engine->pending.erase(engine->pending.begin(), engine->pending.begin() + static_cast<std::ptrdiff_t>(n));
    engine->logprobs.assign(n, {});
    engine->top_ids.assign(n, {});
    engine->top_logprobs.assign(n, {});
    for (size_t i = 0; i < n; ++i) {
      const photon::RequestEvent& e = engine->handed_out[i];
      photon_event& c = events[i];
      c = photon_event{};
      c.request_id = e.request_id;
      c.token_ids = e.token_ids.data();
      c.num_tokens = e.token_ids.size();
      if (!e.logprobs.empty()) {
        const auto top_n = static_cast<int32_t>(e.logprobs.front().top.size());
        for (const auto& lp : e.logprobs) {
          engine->logprobs[i].push_back(lp.logprob);
          for (int32_t k = 0; k < top_n; ++k) {
            const bool has = static_cast<size_t>(k) < lp.top.size();
            engine->top_ids[i].push_back(has ? lp.top[static_cast<size_t>(k)].first : -1);
            engine->top_logprobs[i].push_back(has ? lp.top[static_cast<size_t>(k)].second : 0.0f);
          }
        }
        c.logprobs = engine->logprobs[i].data();
        c.top_n = top_n;
        c.top_ids = top_n > 0 ? engine->top_ids[i].data() : nullptr;
        c.top_logprobs = top_n > 0 ? engine->top_logprobs[i].data() : nullptr;
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

photon_status photon_get_stats(photon_engine* engine, photon_stats* out) {
  return guarded(engine, [&]() -> photon_status {
    if (out == nullptr) return fail(engine, {photon::StatusCode::kInvalidArgument, "out is NULL"});
    const photon::EngineStats s = engine->engine->stats();
    photon_stats full{};
    full.struct_size = out->struct_size;
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
    std::memcpy(out, &full, std::min(out->struct_size, sizeof(photon_stats)));
    return PHOTON_OK;
  });
}

photon_status photon_tokenizer_load(const char* path, photon_tokenizer** out) {
  if (out == nullptr) return fail_global(PHOTON_ERROR_INVALID_ARGUMENT, "out_tokenizer is NULL");
  *out = nullptr;
  if (path == nullptr) return fail_global(PHOTON_ERROR_INVALID_ARGUMENT, "path is NULL");
  try {
    auto tok = photon::Tokenizer::load(path);
    if (!tok) return fail_global(to_c(tok.status().code()), tok.status().message());
    *out = reinterpret_cast<photon_tokenizer*>(tok->release());
    return PHOTON_OK;
  } catch (const std::exception& ex) {
    return fail_global(PHOTON_ERROR_INTERNAL, ex.what());
  } catch (...) {
    return fail_global(PHOTON_ERROR_INTERNAL, "unknown exception");
  }
}

void photon_tokenizer_destroy(photon_tokenizer* tokenizer) { delete reinterpret_cast<photon::Tokenizer*>(tokenizer); }

photon_status photon_tokenizer_encode(const photon_tokenizer* tokenizer, const char* text, size_t text_len,
                                      int add_special_tokens, int32_t* ids, size_t capacity, size_t* out_count) {
  if (tokenizer == nullptr || out_count == nullptr || (text == nullptr && text_len > 0) ||
      (ids == nullptr && capacity > 0)) {
    return fail_global(PHOTON_ERROR_INVALID_ARGUMENT, "tokenizer, text, ids or out_count is NULL");
  }
  try {
    const auto* tok = reinterpret_cast<const photon::Tokenizer*>(tokenizer);
    const auto out = tok->encode(std::string_view(text == nullptr ? "" : text, text_len), add_special_tokens != 0);
    *out_count = out.size();
    if (out.size() > capacity) {
      return fail_global(PHOTON_ERROR_RESOURCE_EXHAUSTED, "the ids buffer holds " + std::to_string(capacity) +
                                                              " ids but " + std::to_string(out.size()) + " are needed");
    }
    std::copy(out.begin(), out.end(), ids);
    return PHOTON_OK;
  } catch (...) {
    return fail_global(PHOTON_ERROR_INTERNAL, "unexpected exception while encoding");
  }
}

photon_status photon_tokenizer_decode(const photon_tokenizer* tokenizer, const int32_t* ids, size_t num_ids,
                                      int skip_special_tokens, char* text, size_t capacity, size_t* out_len) {
  if (tokenizer == nullptr || out_len == nullptr || (ids == nullptr && num_ids > 0) ||
      (text == nullptr && capacity > 0)) {
    return fail_global(PHOTON_ERROR_INVALID_ARGUMENT, "tokenizer, ids, text or out_len is NULL");
  }
  try {
    const auto* tok = reinterpret_cast<const photon::Tokenizer*>(tokenizer);
    auto out = tok->decode(std::span<const int32_t>(ids, num_ids), skip_special_tokens != 0);
    if (!out) return fail_global(to_c(out.status().code()), out.status().message());
    *out_len = out->size();
    if (out->size() > capacity) {
      return fail_global(PHOTON_ERROR_RESOURCE_EXHAUSTED, "the text buffer holds " + std::to_string(capacity) +
                                                              " bytes but " + std::to_string(out->size()) +
                                                              " are needed");
    }
    std::copy(out->begin(), out->end(), text);
    return PHOTON_OK;
  } catch (...) {
    return fail_global(PHOTON_ERROR_INTERNAL, "unexpected exception while decoding");
  }
}

}  // extern "C"
