/* The C ABI driven from C11: create, submit, step, poll, cancel, stats, prompt logprobs, model info, logging,
 * errors, destroy. argv[1]: a model folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "photon.h"

static int failures = 0;
static int passes = 0;
#define EXPECT(cond)                                                      \
  do {                                                                    \
    if (cond) {                                                           \
      ++passes;                                                           \
    } else {                                                              \
      ++failures;                                                         \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
    }                                                                     \
  } while (0)

typedef struct {
  int32_t tokens[64];
  int n;
  int finished;
  photon_finish_reason reason;
} collected;

static void drain(photon_engine* e, collected* out, uint64_t first_id, int count) {
  photon_event events[4]; /* small on purpose: events that do not fit stay queued */
  while (photon_has_unfinished(e)) {
    EXPECT(photon_step(e) == PHOTON_OK);
    size_t n = 0;
    do {
      EXPECT(photon_poll(e, events, 4, &n) == PHOTON_OK);
      for (size_t i = 0; i < n; ++i) {
        const int k = (int)(events[i].request_id - first_id);
        if (k < 0 || k >= count) continue;
        for (size_t t = 0; t < events[i].num_tokens && out[k].n < 64; ++t)
          out[k].tokens[out[k].n++] = events[i].token_ids[t];
        if (events[i].finished) {
          out[k].finished = 1;
          out[k].reason = events[i].finish_reason;
        }
      }
    } while (n == 4);
  }
}

typedef struct {
  int records;
  int saw_engine_ready;
} log_capture;

static void capture_log(photon_log_level level, const char* message, void* user_data) {
  log_capture* c = (log_capture*)user_data;
  ++c->records;
  if (level == PHOTON_LOG_INFO && strstr(message, "engine ready") != NULL) c->saw_engine_ready = 1;
}

static void count_progress(uint64_t done, uint64_t total, void* user_data) {
  uint64_t* calls = (uint64_t*)user_data;
  if (done <= total) ++*calls;
}

/* Greedy tokens of `prompt` on a fresh engine over `model` with the given scheduling and weight quantization ("none"
 * or "int8", groups of 32); returns how many, or -1 when the engine was not created. */
static int greedy_tokens(const char* model, int async_scheduling, int enforce_eager, const char* quantization,
                         int32_t* tokens) {
  photon_engine_params p = photon_engine_params_default();
  p.quantization = quantization;
  p.group_size = 32;
  p.model = model;
  p.num_kv_blocks = 16;
  p.block_size = 4;
  p.max_model_len = 32;
  p.async_scheduling = async_scheduling;
  p.enforce_eager = enforce_eager;
  photon_engine* e = NULL;
  if (photon_engine_create(&p, &e) != PHOTON_OK) return -1;
  photon_sampling_params sp = photon_sampling_params_default();
  sp.temperature = 0.0f;
  sp.max_tokens = 10;
  sp.ignore_eos = 1;
  const int32_t prompt[] = {7, 8, 9, 10};
  uint64_t id = 0;
  int n = 0;
  if (photon_submit(e, prompt, 4, &sp, &id) == PHOTON_OK) {
    while (photon_has_unfinished(e)) {
      photon_event ev[4];
      size_t got = 0;
      if (photon_step(e) != PHOTON_OK || photon_poll(e, ev, 4, &got) != PHOTON_OK) break;
      for (size_t k = 0; k < got; ++k)
        for (size_t t = 0; t < ev[k].num_tokens && n < 16; ++t) tokens[n++] = ev[k].token_ids[t];
    }
  }
  photon_engine_destroy(e);
  return n;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
    return 2;
  }
  EXPECT(photon_version_major() == PHOTON_C_VERSION_MAJOR);
  EXPECT(strlen(photon_version_string()) > 0);
  EXPECT(strcmp(photon_status_string(PHOTON_ERROR_NOT_FOUND), "not found") == 0);
  photon_engine_destroy(NULL);

  /* A binding's older, shorter declaration: *_init writes its bytes only, and says what is too short. */
  {
    photon_engine_params older;
    memset(&older, 0x5a, sizeof older);
    const size_t first = offsetof(photon_engine_params, rank) + sizeof older.rank; /* the 0.1 layout */
    EXPECT(photon_engine_params_init(&older, first) == PHOTON_OK);
    EXPECT(older.struct_size == first && older.model == NULL && older.block_size > 0 &&
           older.tensor_parallel_size == 1);
    EXPECT(older.enforce_eager == 0x5a5a5a5a); /* past the declared size: untouched */
    EXPECT(photon_engine_params_init(&older, 4) == PHOTON_ERROR_INVALID_ARGUMENT);
    EXPECT(strstr(photon_last_error(), "struct_size") != NULL);
    photon_sampling_params sampling;
    EXPECT(photon_sampling_params_init(&sampling, sizeof sampling) == PHOTON_OK);
    EXPECT(sampling.struct_size == sizeof sampling && sampling.temperature == 1.0f && sampling.prompt_logprobs == -1);
    EXPECT(photon_sampling_params_init(NULL, sizeof sampling) == PHOTON_ERROR_INVALID_ARGUMENT);
  }

  photon_engine* e = NULL;
  photon_engine_params params = photon_engine_params_default();
  params.model = "/nonexistent/model";
  EXPECT(photon_engine_create(&params, &e) == PHOTON_ERROR_NOT_FOUND);
  EXPECT(e == NULL);
  EXPECT(strstr(photon_last_error(), "config.json") != NULL);

  /* Logging goes to the caller's callback, at the caller's level. */
  log_capture logs = {0, 0};
  photon_log_set(capture_log, &logs);
  photon_log_set_level(PHOTON_LOG_INFO);
  uint64_t progress_calls = 0;
  params.model = argv[1];
  params.block_size = 4;
  params.num_kv_blocks = 32;
  params.max_model_len = 64;
  params.load_progress = count_progress;
  params.load_progress_user_data = &progress_calls;
  EXPECT(photon_engine_create(&params, &e) == PHOTON_OK);
  if (e == NULL) return 1;
  EXPECT(logs.saw_engine_ready == 1);
  EXPECT(progress_calls > 0);
  photon_log_set_level(PHOTON_LOG_OFF);
  const int records = logs.records;
  photon_engine* silent = NULL;
  EXPECT(photon_engine_create(&params, &silent) == PHOTON_OK);
  EXPECT(logs.records == records); /* below the threshold: dropped */
  photon_engine_destroy(silent);
  photon_log_set(NULL, NULL);
  photon_log_set_level(PHOTON_LOG_WARN);
  EXPECT(photon_engine_vocab_size(e) == 1000);
  EXPECT(photon_engine_max_model_len(e) == 64);
  EXPECT(photon_engine_tokenizer(e) == NULL);

  photon_model_info info;
  info.struct_size = sizeof info;
  EXPECT(photon_engine_model_info(e, &info) == PHOTON_OK);
  EXPECT(info.struct_size == sizeof info);
  EXPECT(strcmp(info.architecture, "LlamaForCausalLM") == 0 && strcmp(info.device, "cpu") == 0);
  EXPECT(info.vocab_size == 1000 && info.max_model_len == 64 && info.num_eos_token_ids >= 1);
  info.struct_size = 3;
  EXPECT(photon_engine_model_info(e, &info) == PHOTON_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(photon_engine_last_error(e), "struct_size") != NULL);

  photon_sampling_params sp = photon_sampling_params_default();
  sp.temperature = 0.0f;
  sp.max_tokens = 12;
  sp.ignore_eos = 1;
  const int32_t prompt[] = {3, 14, 15, 92, 65, 35};
  uint64_t ids[3] = {0, 0, 0};
  EXPECT(photon_submit(e, prompt, 6, &sp, &ids[0]) == PHOTON_OK);
  EXPECT(photon_submit(e, prompt, 6, &sp, &ids[1]) == PHOTON_OK);
  sp.max_tokens = 50;
  EXPECT(photon_submit(e, prompt, 6, &sp, &ids[2]) == PHOTON_OK);
  EXPECT(ids[1] == ids[0] + 1 && ids[2] == ids[0] + 2);
  EXPECT(photon_step(e) == PHOTON_OK);
  EXPECT(photon_cancel(e, ids[2]) == PHOTON_OK);

  collected out[3];
  memset(out, 0, sizeof out);
  drain(e, out, ids[0], 3);
  EXPECT(out[0].finished && out[0].reason == PHOTON_FINISH_LENGTH && out[0].n == 12);
  EXPECT(out[1].n == 12 && memcmp(out[0].tokens, out[1].tokens, sizeof(int32_t) * 12) == 0);
  EXPECT(out[2].finished && out[2].reason == PHOTON_FINISH_CANCELLED);

  /* A logit bias (since 0.3): +100 on one id makes greedy decoding choose it every time; -100 on the first token
   * chosen without bias moves the choice away from it; an id outside the vocabulary is an error naming it. */
  {
    photon_sampling_params bias = sp;
    bias.max_tokens = 5;
    const int32_t forced_id = 777, banned_id = out[0].tokens[0];
    const float up = 100.0f, down = -100.0f;
    bias.logit_bias_ids = &forced_id;
    bias.logit_bias_values = &up;
    bias.num_logit_bias = 1;
    uint64_t forced = 0, banned = 0, wrong = 0;
    EXPECT(photon_submit(e, prompt, 6, &bias, &forced) == PHOTON_OK);
    bias.logit_bias_ids = &banned_id;
    bias.logit_bias_values = &down;
    EXPECT(photon_submit(e, prompt, 6, &bias, &banned) == PHOTON_OK);
    collected biased[2];
    memset(biased, 0, sizeof biased);
    drain(e, biased, forced, 2);
    EXPECT(banned == forced + 1 && biased[0].n == 5 && biased[1].n == 5);
    for (int t = 0; t < biased[0].n; ++t) EXPECT(biased[0].tokens[t] == forced_id);
    EXPECT(biased[1].tokens[0] != banned_id);
    const int32_t outside = 1000;
    bias.logit_bias_ids = &outside;
    EXPECT(photon_submit(e, prompt, 6, &bias, &wrong) == PHOTON_ERROR_INVALID_ARGUMENT);
    EXPECT(strstr(photon_engine_last_error(e), "logit_bias names token id 1000") != NULL);
    bias.logit_bias_values = NULL;
    EXPECT(photon_submit(e, prompt, 6, &bias, &wrong) == PHOTON_ERROR_INVALID_ARGUMENT);
  }

  /* Prompt logprobs reach C callers, position by position. */
  photon_sampling_params lp = photon_sampling_params_default();
  lp.temperature = 0.0f;
  lp.max_tokens = 2;
  lp.prompt_logprobs = 2;
  uint64_t lp_id = 0;
  EXPECT(photon_submit(e, prompt, 6, &lp, &lp_id) == PHOTON_OK);
  int32_t positions = 0, next_position = 1, sorted = 1;
  while (photon_has_unfinished(e)) {
    photon_event ev[4];
    size_t n = 0;
    EXPECT(photon_step(e) == PHOTON_OK);
    /* One thread here: an event is waiting exactly when the poll returns one (a step may leave its tokens in
     * flight until the next). */
    const int waiting = photon_wait_for_events(e, 0);
    EXPECT(photon_poll(e, ev, 4, &n) == PHOTON_OK);
    EXPECT(waiting == (n > 0));
    for (size_t k = 0; k < n; ++k) {
      photon_prompt_logprobs pl;
      pl.struct_size = sizeof pl;
      EXPECT(photon_event_prompt_logprobs(e, k, &pl) == PHOTON_OK);
      if (pl.count == 0) continue;
      EXPECT(pl.begin == next_position && pl.top_n == 2);
      for (size_t j = 0; j < pl.count; ++j) {
        EXPECT(pl.token_ids[j] == prompt[pl.begin + (int32_t)j]);
        EXPECT(pl.logprobs[j] <= 0.0f && pl.logprobs[j] <= pl.top_logprobs[2 * j] + 1e-6f);
        if (pl.top_logprobs[2 * j] < pl.top_logprobs[2 * j + 1]) sorted = 0;
      }
      positions += (int32_t)pl.count;
      next_position = pl.begin + (int32_t)pl.count;
    }
    photon_prompt_logprobs beyond;
    beyond.struct_size = sizeof beyond;
    EXPECT(photon_event_prompt_logprobs(e, n, &beyond) == PHOTON_ERROR_INVALID_ARGUMENT);
  }
  EXPECT(positions == 5 && sorted);
  EXPECT(photon_wait_for_events(e, 1) == 0);

  /* Scheduling switches: synchronous and eager engines give the same greedy tokens as the default. */
  int32_t by_default[16], sync[16], eager[16];
  const int n_default = greedy_tokens(argv[1], 1, 0, "none", by_default);
  EXPECT(n_default == 10);
  EXPECT(greedy_tokens(argv[1], 0, 0, "none", sync) == 10 && memcmp(by_default, sync, sizeof(int32_t) * 10) == 0);
  EXPECT(greedy_tokens(argv[1], 1, 1, "none", eager) == 10 && memcmp(by_default, eager, sizeof(int32_t) * 10) == 0);
  /* Int8 weights (since 0.3): quantized at load; an unknown scheme is a clear error. */
  {
    const photon_engine_params d = photon_engine_params_default();
    EXPECT(strcmp(d.quantization, "none") == 0 && d.group_size == 128 && d.quantize_lm_head == 0);
    int32_t int8[16];
    EXPECT(greedy_tokens(argv[1], 1, 0, "int8", int8) == 10);
    EXPECT(greedy_tokens(argv[1], 1, 0, "int4", int8) == -1);
    EXPECT(strstr(photon_last_error(), "none or int8") != NULL);
  }

  /* Bad input: a clear error, and the engine stays usable. */
  const int32_t bad[] = {5, 100000};
  uint64_t id = 0;
  EXPECT(photon_submit(e, bad, 2, &sp, &id) == PHOTON_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(photon_engine_last_error(e), "outside the vocabulary") != NULL);
  EXPECT(photon_submit(e, NULL, 3, &sp, &id) == PHOTON_ERROR_INVALID_ARGUMENT);
  EXPECT(photon_cancel(e, 999999) == PHOTON_ERROR_NOT_FOUND);
  EXPECT(photon_step(NULL) == PHOTON_ERROR_INVALID_ARGUMENT);

  photon_stats stats;
  stats.struct_size = sizeof stats;
  EXPECT(photon_get_stats(e, &stats) == PHOTON_OK);
  EXPECT(stats.num_kv_blocks == 32 && stats.num_free_kv_blocks == 32);
  EXPECT(stats.num_generated_tokens >= 24);
  EXPECT(stats.weight_bytes > 0);
  EXPECT(stats.struct_size == sizeof stats && stats.block_size == 4 && stats.num_prompt_tokens > 0);
  /* A caller of the first layout (up to num_generated_tokens) is filled only as far as it reaches. */
  photon_stats small;
  memset(&small, 0x7f, sizeof small);
  small.struct_size = offsetof(photon_stats, num_generated_tokens) + sizeof small.num_generated_tokens;
  EXPECT(photon_get_stats(e, &small) == PHOTON_OK);
  EXPECT(small.num_kv_blocks == 32 && small.prefix_cache_queries == 0x7f7f7f7f7f7f7f7f);
  /* A struct_size that is no layout at all is an error that says what to set. */
  small.struct_size = offsetof(photon_stats, num_waiting);
  EXPECT(photon_get_stats(e, &small) == PHOTON_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(photon_engine_last_error(e), "sizeof(photon_stats)") != NULL);
  photon_sampling_params tiny = photon_sampling_params_default();
  tiny.struct_size = 1;
  EXPECT(photon_submit(e, prompt, 6, &tiny, &id) == PHOTON_ERROR_INVALID_ARGUMENT);

  EXPECT(photon_submit_text(e, "hello", &sp, &id) == PHOTON_ERROR_UNSUPPORTED); /* no tokenizer here */
  EXPECT(photon_submit_chat(e, "[{\"role\":\"user\",\"content\":\"hi\"}]", NULL, NULL, &sp, &id) ==
         PHOTON_ERROR_UNSUPPORTED);
  photon_engine_destroy(e);

  /* Tokenizer handle, when the real files have been fetched (scripts/fetch-tokenizers.sh). */
  photon_tokenizer* tok = NULL;
  EXPECT(photon_tokenizer_load("/nonexistent", &tok) == PHOTON_ERROR_NOT_FOUND && tok == NULL);
  char path[4096];
  const char* home = getenv("HOME");
  snprintf(path, sizeof path, "%s/.cache/photon/tokenizers/llama3", home ? home : "");
  if (photon_tokenizer_load(path, &tok) == PHOTON_OK) {
    int32_t ids[8];
    size_t n = 0;
    EXPECT(photon_tokenizer_encode(tok, "Hello world!", 12, 1, ids, 2, &n) == PHOTON_ERROR_BUFFER_TOO_SMALL && n == 4);
    EXPECT(strcmp(photon_status_string(PHOTON_ERROR_BUFFER_TOO_SMALL), "buffer too small") == 0);
    EXPECT(photon_tokenizer_encode(tok, "Hello world!", 12, 1, ids, 8, &n) == PHOTON_OK && n == 4);
    EXPECT(ids[0] == 128000 && ids[1] == 9906);
    char text[64];
    size_t len = 0;
    EXPECT(photon_tokenizer_decode(tok, ids, n, 1, text, sizeof text, &len) == PHOTON_OK);
    EXPECT(len == 12 && memcmp(text, "Hello world!", 12) == 0);
    const int32_t bad_ids[] = {1, 99999999};
    EXPECT(photon_tokenizer_decode(tok, bad_ids, 2, 0, text, sizeof text, &len) == PHOTON_ERROR_INVALID_ARGUMENT);
    EXPECT(strstr(photon_last_error(), "99999999") != NULL);
    photon_tokenizer_destroy(tok);

    /* An engine with the real tokenizer and its chat template. */
    photon_engine_params tp = photon_engine_params_default();
    tp.model = "dummy:tiny-llama3";
    tp.tokenizer = path;
    tp.num_kv_blocks = 16;
    tp.max_model_len = 64;
    photon_engine* te = NULL;
    EXPECT(photon_engine_create(&tp, &te) == PHOTON_OK);
    if (te != NULL) {
      const char* chat = "[{\"role\":\"user\",\"content\":\"Hi\"}]";
      size_t need = 0;
      EXPECT(photon_engine_tokenizer(te) != NULL);
      EXPECT(photon_render_chat(te, chat, NULL, NULL, 1, text, 4, &need) == PHOTON_ERROR_BUFFER_TOO_SMALL);
      char prompt[256];
      size_t plen = 0;
      EXPECT(photon_render_chat(te, chat, NULL, NULL, 1, prompt, sizeof prompt, &plen) == PHOTON_OK && plen == need);
      EXPECT(plen > 20 && memcmp(prompt, "<|begin_of_text|>", 17) == 0);
      sp.max_tokens = 4;
      EXPECT(photon_submit_chat(te, chat, NULL, NULL, &sp, &id) == PHOTON_OK);
      EXPECT(photon_submit_text(te, "Hello", &sp, &id) == PHOTON_OK);
      size_t text_bytes = 0;
      while (photon_has_unfinished(te)) {
        photon_event ev[8];
        size_t n_ev = 0;
        EXPECT(photon_step(te) == PHOTON_OK);
        EXPECT(photon_poll(te, ev, 8, &n_ev) == PHOTON_OK);
        for (size_t k = 0; k < n_ev; ++k) text_bytes += ev[k].text_len;
      }
      EXPECT(text_bytes > 0);
      photon_engine_destroy(te);
    }
  } else {
    printf("SKIP: tokenizer C API checks (run scripts/fetch-tokenizers.sh)\n");
  }
  photon_tokenizer_destroy(NULL);

  /* A multi-process group's worker entry point refuses what cannot be a worker, and says why. */
  EXPECT(photon_run_tensor_parallel_worker(NULL) == PHOTON_ERROR_INVALID_ARGUMENT);
  photon_engine_params wp = photon_engine_params_default();
  wp.model = argv[1];
  wp.tensor_parallel_size = 2;
  wp.rank = 1;
  EXPECT(photon_run_tensor_parallel_worker(&wp) == PHOTON_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(photon_last_error(), "dist_init_addr") != NULL);
  wp.dist_init_addr = "127.0.0.1:29999";
  wp.rank = 0;
  EXPECT(photon_run_tensor_parallel_worker(&wp) == PHOTON_ERROR_INVALID_ARGUMENT);
  wp.rank = 1;
  photon_engine* not_rank0 = NULL;
  EXPECT(photon_engine_create(&wp, &not_rank0) == PHOTON_ERROR_INVALID_ARGUMENT && not_rank0 == NULL);
  printf("%d passed, %d failed\n", passes, failures);
  return failures == 0 ? 0 : 1;
}
