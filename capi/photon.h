/*
 * PhotonInfer C API — the stable ABI of libphoton.
 *
 * Pure C (C99 and later, and C++). Every function is safe to call from any language that can call C: no exception,
 * abort or signal ever crosses this boundary, and the library never writes to stdout.
 *
 * Conventions
 *   - Handles are opaque. Each *_create has a *_destroy; destroy functions accept NULL.
 *   - Parameter structs start with `struct_size`; initialise them with their *_default() function, then change
 *     fields. The library reads only the fields that fit in struct_size, so programs built against older headers
 *     keep working with newer libraries. A *_default() function returns the struct by value, in this header's
 *     layout: bindings that declare their own copy of a struct (ctypes, cgo) call the *_init(ptr, size) function
 *     instead, which writes only `size` bytes (it sets struct_size to `size`).
 *   - Functions return photon_status (PHOTON_OK is 0). On an error, photon_engine_last_error(engine) — or
 *     photon_last_error() for functions without an engine, such as photon_engine_create — returns a message that
 *     says what went wrong and what to change.
 *   - Memory: callers own the buffers they pass in. Pointers inside returned structs (photon_event,
 *     photon_prompt_logprobs) point into engine-owned memory that stays valid until the next photon_poll on the
 *     same engine or its destruction. Functions that write into a caller's buffer take its capacity and always
 *     report the size needed; when the buffer is smaller they write nothing and return
 *     PHOTON_ERROR_BUFFER_TOO_SMALL: call again with a buffer that large.
 *   - Structs the library fills (photon_stats, photon_model_info) also start with `struct_size`: set it to the size
 *     of your declaration. The library fills the fields that fit and sets struct_size to the bytes it filled; a
 *     struct_size smaller than the struct's first published layout is PHOTON_ERROR_INVALID_ARGUMENT.
 *
 * Thread safety
 *   photon_submit, photon_cancel, photon_poll, photon_get_stats and photon_has_unfinished may be called from any
 *   thread at any time, and so may photon_wait_for_events, photon_engine_model_info and the functions of a
 *   tokenizer handle. photon_step must not run concurrently with itself on the same engine. photon_start runs
 *   the step loop on an engine-owned thread; do not call photon_step while it runs. Different engines are
 *   independent. photon_last_error is per thread; photon_engine_last_error is per engine. photon_log_set and
 *   photon_log_set_level may be called from any thread; the callback may be invoked from any thread, several at
 *   once, and must not call back into the library.
 */
#ifndef PHOTON_H
#define PHOTON_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define PHOTON_C_API __declspec(dllimport)
#else
#define PHOTON_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Version of these headers. Compare with photon_version_major() etc. at run time; the ABI is stable within one
 * major version (the shared library's SOVERSION). */
#define PHOTON_C_VERSION_MAJOR 0
#define PHOTON_C_VERSION_MINOR 3
#define PHOTON_C_VERSION_PATCH 0

PHOTON_C_API int photon_version_major(void);
PHOTON_C_API int photon_version_minor(void);
PHOTON_C_API int photon_version_patch(void);
/* "MAJOR.MINOR.PATCH"; static storage. */
PHOTON_C_API const char* photon_version_string(void);

typedef enum photon_status {
  PHOTON_OK = 0,
  PHOTON_ERROR_INVALID_ARGUMENT = 1, /* a value passed in is wrong */
  PHOTON_ERROR_NOT_FOUND = 2,        /* a file, tensor or request id does not exist */
  PHOTON_ERROR_IO = 3,               /* reading a file, or a network connection, failed */
  PHOTON_ERROR_FORMAT = 4,           /* a file is malformed */
  PHOTON_ERROR_UNSUPPORTED = 5,      /* valid, but not supported by this build */
  PHOTON_ERROR_OUT_OF_MEMORY = 6,    /* an allocation failed or the memory budget is too small */
  PHOTON_ERROR_RESOURCE_EXHAUSTED = 7,
  PHOTON_ERROR_CANCELLED = 8,
  PHOTON_ERROR_INTERNAL = 9,         /* a bug; please report it with the message */
  PHOTON_ERROR_BUFFER_TOO_SMALL = 10 /* a caller's buffer is too small; the size needed was written (since 0.2) */
} photon_status;

/* A short name for a status ("ok", "invalid argument", ...); static storage. */
PHOTON_C_API const char* photon_status_string(photon_status status);

/* The message of the last failed call on this thread that had no engine (e.g. photon_engine_create); "" if none.
 * Valid until the next such call on the same thread. */
PHOTON_C_API const char* photon_last_error(void);

/* ---- logging --------------------------------------------------------------------------------------------------- */

/* Severity of a log record, lowest first. */
typedef enum photon_log_level {
  PHOTON_LOG_DEBUG = 0,
  PHOTON_LOG_INFO = 1,
  PHOTON_LOG_WARN = 2, /* the default threshold */
  PHOTON_LOG_ERROR = 3,
  PHOTON_LOG_OFF = 4
} photon_log_level;

/* Receives one log record: a NUL-terminated UTF-8 message without a trailing newline, valid only during the call. */
typedef void (*photon_log_callback)(photon_log_level level, const char* message, void* user_data);

/* Sends the library's log records (process-wide) to `callback` with `user_data`; NULL restores the default, standard
 * error. Records below the threshold (photon_log_set_level) are dropped before formatting. */
PHOTON_C_API void photon_log_set(photon_log_callback callback, void* user_data);
/* Records below `level` are dropped; PHOTON_LOG_OFF silences the library. Values outside the enum are ignored. */
PHOTON_C_API void photon_log_set_level(photon_log_level level);

/* ---- engine ---------------------------------------------------------------------------------------------------- */

typedef struct photon_engine photon_engine;

typedef struct photon_engine_params {
  size_t struct_size;
  const char* model;              /* checkpoint folder or "dummy:NAME"; required */
  const char* load_format;        /* "auto" (default), "safetensors" or "dummy" */
  const char* device;             /* "cpu" (default), "cuda" or "cuda:N" */
  const char* dtype;              /* dummy weights: "bf16" (default), "f16", "f32" */
  const char* kv_cache_dtype;     /* "auto" (default), "f32", "bf16" */
  uint64_t kv_cache_memory_bytes; /* 0: from memory_utilization */
  double memory_utilization;      /* fraction of the device's memory in all; 0 (default): 0.9 GPU, 0.5 CPU */
  int64_t num_kv_blocks;          /* > 0 overrides both budgets */
  int32_t block_size;             /* tokens per KV block; default 16 */
  int32_t max_num_seqs;           /* default 64 */
  int32_t max_num_batched_tokens; /* default 512 */
  int32_t max_model_len;          /* 0: the model's context */
  int32_t enable_prefix_caching;  /* non-zero (default) to reuse shared prompt prefixes */
  uint64_t seed;                  /* dummy weights and unseeded requests */
  const char* tokenizer;          /* tokenizer folder or file; NULL: the model folder's tokenizer.json if any */
  int32_t tensor_parallel_size;   /* GPUs (threads with device "cpu") to split the model across; default 1 */
  const char* dist_init_addr;     /* one process per rank: "host:port" where rank 0 listens; NULL: one process */
  int32_t rank;                   /* this process's rank with dist_init_addr (0 creates the engine) */
  /* Since 0.2. */
  int32_t enforce_eager;    /* non-zero: never replay decode steps as CUDA graphs (default 0) */
  int32_t async_scheduling; /* non-zero (default): plan each step while the GPU runs the previous one */
  int32_t peer_all_reduce;  /* non-zero (default): one-shot NVLink all-reduce for small tensor-parallel messages */
  /* Called while weights load with (bytes done, bytes total, load_progress_user_data), on the creating thread; NULL
   * (default) for none. */
  void (*load_progress)(uint64_t done, uint64_t total, void* user_data);
  void* load_progress_user_data;
  /* Since 0.3. */
  const char* quantization; /* "none" (default) or "int8": group-wise int8 projections, quantized at load */
  int32_t group_size;       /* input features per int8 scale: 32, 64 or 128 (default) */
  int32_t quantize_lm_head; /* non-zero with "int8": the LM head too (default 0) */
} photon_engine_params;

PHOTON_C_API photon_engine_params photon_engine_params_default(void);
/* Writes the defaults into the first `struct_size` bytes of *params (at least up to `model`; since 0.2). */
PHOTON_C_API photon_status photon_engine_params_init(photon_engine_params* params, size_t struct_size);

/* Loads the model and takes all memory up front. On success *out_engine owns a new engine; on failure it is set to
 * NULL and photon_last_error() says why. */
PHOTON_C_API photon_status photon_engine_create(const photon_engine_params* params, photon_engine** out_engine);
/* Serves tensor-parallel rank params->rank (1 .. tensor_parallel_size - 1) of a multi-process group whose rank 0
 * called photon_engine_create with the same params and dist_init_addr. Blocks until rank 0's engine is destroyed
 * (PHOTON_OK) or an error (photon_last_error() says which). */
PHOTON_C_API photon_status photon_run_tensor_parallel_worker(const photon_engine_params* params);
/* Stops the background loop if running and frees every byte the engine holds. NULL is ignored. */
PHOTON_C_API void photon_engine_destroy(photon_engine* engine);
/* The message of the last failed call on `engine` (from any thread); "" if none. The string is a copy owned by the
 * calling thread, valid until its next call of this function. */
PHOTON_C_API const char* photon_engine_last_error(const photon_engine* engine);

/* Facts about the loaded model. */
PHOTON_C_API int64_t photon_engine_vocab_size(const photon_engine* engine);
PHOTON_C_API int32_t photon_engine_max_model_len(const photon_engine* engine);

/* Everything the engine knows about its model (since 0.2). Strings and arrays point into engine-owned memory valid
 * for the engine's lifetime. */
typedef struct photon_model_info {
  size_t struct_size;
  const char* architecture; /* e.g. "LlamaForCausalLM" */
  int64_t vocab_size;
  int32_t max_model_len; /* the engine's limit for prompt + output */
  int32_t bos_token_id;  /* -1: the model has none */
  const int32_t* eos_token_ids;
  size_t num_eos_token_ids;
  const char* device;             /* e.g. "cuda:0" */
  const char* device_description; /* e.g. "NVIDIA H200 (sm_90, 139.8 GiB)" */
} photon_model_info;

/* Fills *out (see the struct_size convention above). */
PHOTON_C_API photon_status photon_engine_model_info(const photon_engine* engine, photon_model_info* out);

typedef struct photon_tokenizer photon_tokenizer;

/* The engine's own tokenizer, or NULL when it has none (it then takes token ids only). Borrowed: valid for the
 * engine's lifetime; do not destroy it. */
PHOTON_C_API const photon_tokenizer* photon_engine_tokenizer(const photon_engine* engine);

/* ---- requests -------------------------------------------------------------------------------------------------- */

typedef struct photon_sampling_params {
  size_t struct_size;
  float temperature;        /* default 1; 0 is greedy */
  int32_t top_k;            /* 0: off */
  float top_p;              /* 1: off */
  float min_p;              /* 0: off */
  float repetition_penalty; /* 1: off */
  float presence_penalty;   /* 0: off */
  float frequency_penalty;  /* 0: off */
  int32_t max_tokens;       /* default 16 */
  int32_t has_seed;         /* non-zero: use `seed` */
  uint64_t seed;
  int32_t ignore_eos;
  const int32_t* stop_token_ids; /* copied during photon_submit */
  size_t num_stop_token_ids;
  int32_t logprobs;        /* < 0: none; else report each token's logprob and the top N */
  int32_t prompt_logprobs; /* < 0: none; else each prompt token's logprob and the top N */
  int32_t priority;        /* lower first */
  const char* const* stop; /* stop strings (copied during photon_submit); need a tokenizer */
  size_t num_stop;
  /* Since 0.3. OpenAI's logit_bias: logit_bias_values[i] (-100 to 100) is added to the logit of token
   * logit_bias_ids[i] before sampling, each id at most once (both arrays copied during photon_submit). */
  const int32_t* logit_bias_ids;
  const float* logit_bias_values;
  size_t num_logit_bias;
} photon_sampling_params;

PHOTON_C_API photon_sampling_params photon_sampling_params_default(void);
/* Writes the defaults into the first `struct_size` bytes of *params (at least up to `temperature`; since 0.2). */
PHOTON_C_API photon_status photon_sampling_params_init(photon_sampling_params* params, size_t struct_size);

/* Queues a request for `num_tokens` prompt ids (copied). *out_request_id receives its id. */
PHOTON_C_API photon_status photon_submit(photon_engine* engine, const int32_t* prompt, size_t num_tokens,
                                         const photon_sampling_params* params, uint64_t* out_request_id);
/* Same for a UTF-8 text prompt, tokenized by the engine's tokenizer (BOS added as the tokenizer says);
 * PHOTON_ERROR_UNSUPPORTED when the engine has no tokenizer. */
PHOTON_C_API photon_status photon_submit_text(photon_engine* engine, const char* prompt,
                                              const photon_sampling_params* params, uint64_t* out_request_id);
/* Same for a chat: `messages_json` (a JSON array of {"role", "content"} messages) and optional `tools_json` (a
 * JSON array, or NULL) rendered by the model's chat template; `extra_json` (a JSON object of template variables such
 * as {"enable_thinking": false}, or NULL). PHOTON_ERROR_UNSUPPORTED without a chat template. */
PHOTON_C_API photon_status photon_submit_chat(photon_engine* engine, const char* messages_json, const char* tools_json,
                                              const char* extra_json, const photon_sampling_params* params,
                                              uint64_t* out_request_id);
/* The prompt text a chat would produce (the chat template's output), into the caller's buffer: *out_len bytes, not
 * NUL-terminated; PHOTON_ERROR_BUFFER_TOO_SMALL with *out_len set when `capacity` is too small. */
PHOTON_C_API photon_status photon_render_chat(photon_engine* engine, const char* messages_json, const char* tools_json,
                                              const char* extra_json, int add_generation_prompt, char* text,
                                              size_t capacity, size_t* out_len);
/* Ends a request at the next step boundary; it then reports PHOTON_FINISH_CANCELLED. */
PHOTON_C_API photon_status photon_cancel(photon_engine* engine, uint64_t request_id);
/* Runs one schedule -> forward -> sample -> update iteration (nothing when idle). With async scheduling (the
 * default) the next step is already enqueued on the GPU when it returns; the next call, or photon_engine_destroy,
 * completes it. */
PHOTON_C_API photon_status photon_step(photon_engine* engine);
/* 1 while any request is unfinished, else 0. */
PHOTON_C_API int photon_has_unfinished(photon_engine* engine);
/* Blocks until photon_poll has an event or `timeout_ms` passes; 1 when an event is waiting, else 0. */
PHOTON_C_API int photon_wait_for_events(photon_engine* engine, int timeout_ms);
/* Runs photon_step on an engine-owned thread whenever work is pending; photon_stop joins it. */
PHOTON_C_API photon_status photon_start(photon_engine* engine);
PHOTON_C_API void photon_stop(photon_engine* engine);

typedef enum photon_finish_reason {
  PHOTON_FINISH_NONE = 0,
  PHOTON_FINISH_STOP = 1,
  PHOTON_FINISH_LENGTH = 2,
  PHOTON_FINISH_CANCELLED = 3,
  PHOTON_FINISH_ERROR = 4
} photon_finish_reason;

/* What happened to one request since the previous poll. Arrays point into engine-owned memory (see above). */
typedef struct photon_event {
  uint64_t request_id;
  const int32_t* token_ids; /* new tokens */
  size_t num_tokens;
  const float* logprobs;     /* [num_tokens], or NULL when not requested */
  const int32_t* top_ids;    /* [num_tokens * top_n], or NULL */
  const float* top_logprobs; /* [num_tokens * top_n], or NULL */
  int32_t top_n;
  int32_t finished; /* non-zero on the request's last event */
  photon_finish_reason finish_reason;
  const char* error; /* "" unless finish_reason is PHOTON_FINISH_ERROR */
  int32_t num_prompt_tokens;
  int32_t num_output_tokens; /* in total so far */
  int32_t num_cached_prompt_tokens;
  double arrival_time;     /* seconds on the engine's clock */
  double first_token_time; /* 0 until the first token */
  double finish_time;      /* 0 until finished */
  const char* text;        /* UTF-8 text of token_ids ("" without a tokenizer); never half a character */
  size_t text_len;
} photon_event;

/* Moves up to `capacity` pending events into `events` and sets *out_count. Events that do not fit stay queued.
 * Invalidates the arrays of events returned by the previous call. */
PHOTON_C_API photon_status photon_poll(photon_engine* engine, photon_event* events, size_t capacity, size_t* out_count);

/* Prompt logprobs carried by one event (since 0.2): requests submitted with prompt_logprobs >= 0 report them once
 * computed, for prompt positions [begin, begin + count) (position 0 has none); count is 0 on other events. */
typedef struct photon_prompt_logprobs {
  size_t struct_size;
  int32_t begin;
  size_t count;
  const int32_t* token_ids;  /* [count]: the prompt token at each position */
  const float* logprobs;     /* [count]: its logprob given the tokens before it */
  int32_t top_n;             /* alternatives per position */
  const int32_t* top_ids;    /* [count * top_n], most likely first, or NULL */
  const float* top_logprobs; /* [count * top_n], or NULL */
} photon_prompt_logprobs;

/* The prompt logprobs of events[index] of the last photon_poll (see the struct_size convention above); arrays valid
 * like the event's. PHOTON_ERROR_INVALID_ARGUMENT when the last poll returned no event `index`. */
PHOTON_C_API photon_status photon_event_prompt_logprobs(photon_engine* engine, size_t index,
                                                        photon_prompt_logprobs* out);

typedef struct photon_stats {
  size_t struct_size;
  int32_t num_running;
  int32_t num_waiting;
  int64_t num_preemptions;
  int64_t num_steps;
  int64_t prefix_cache_hit_tokens;
  int64_t num_kv_blocks;
  int64_t num_free_kv_blocks;
  int64_t kv_capacity_tokens;
  double kv_usage;
  uint64_t weight_bytes;
  uint64_t kv_cache_bytes;
  int64_t num_generated_tokens;
  /* Since 0.2. */
  int64_t prefix_cache_queries; /* prompt tokens looked up in the prefix cache (hits: prefix_cache_hit_tokens) */
  int64_t num_prompt_tokens;    /* computed so far (cache hits excluded) */
  int32_t block_size;           /* tokens per KV block */
  uint64_t workspace_bytes;     /* activation buffers, all ranks together */
  uint64_t peak_device_bytes;   /* most memory one device's allocator held at once */
} photon_stats;

/* Fills *out (see the struct_size convention above; the first layout ends at num_generated_tokens). */
PHOTON_C_API photon_status photon_get_stats(photon_engine* engine, photon_stats* out);

/* ---- tokenizer ------------------------------------------------------------------------------------------------- */

/* Loads a tokenizer folder (tokenizer.json + tokenizer_config.json) or a tokenizer.json file. On failure
 * *out_tokenizer is NULL and photon_last_error() says why. A tokenizer is immutable: any thread may use it. */
PHOTON_C_API photon_status photon_tokenizer_load(const char* path, photon_tokenizer** out_tokenizer);
PHOTON_C_API void photon_tokenizer_destroy(photon_tokenizer* tokenizer);
/* Token ids of `text_len` bytes of UTF-8 (invalid bytes are replaced by U+FFFD) into the caller's `ids` buffer.
 * *out_count receives the number of ids; when it exceeds `capacity` the call returns
 * PHOTON_ERROR_BUFFER_TOO_SMALL having written nothing: call again with a buffer that large. */
PHOTON_C_API photon_status photon_tokenizer_encode(const photon_tokenizer* tokenizer, const char* text, size_t text_len,
                                                   int add_special_tokens, int32_t* ids, size_t capacity,
                                                   size_t* out_count);
/* UTF-8 text of `ids` into the caller's buffer (not NUL-terminated; *out_len bytes); same capacity protocol.
 * PHOTON_ERROR_INVALID_ARGUMENT names an id outside the vocabulary (photon_last_error). */
PHOTON_C_API photon_status photon_tokenizer_decode(const photon_tokenizer* tokenizer, const int32_t* ids,
                                                   size_t num_ids, int skip_special_tokens, char* text, size_t capacity,
                                                   size_t* out_len);

#ifdef __cplusplus
}
#endif

#endif /* PHOTON_H */
