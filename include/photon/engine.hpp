// PhotonInfer — the engine: continuous batching of many requests over one model.
//
// An Engine owns a model on one device, its paged KV cache, the scheduler and the sampler. Requests go in with
// submit(), each step() advances every scheduled request by one forward pass, and poll() drains what happened:
// new tokens, text, logprobs, and how each request finished.
//
//   auto engine = photon::Engine::create(config);           // Result<std::unique_ptr<Engine>>
//   auto id = (*engine)->submit({128000, 9906}, params);      // Result<uint64_t>
//   while ((*engine)->has_unfinished_requests()) {
//     (*engine)->step();
//     for (auto& e : (*engine)->poll()) { ... }
//   }
//
// Thread safety: submit(), cancel(), poll(), stats() and has_unfinished_requests() may be called from any thread at
// any time. step() must be called from one thread at a time; it is not re-entrant. start() runs step() on a
// background thread owned by the engine (for servers); while it runs, do not call step() yourself. The destructor
// stops that thread. Nothing here writes to stdout, installs signal handlers or spawns processes.
//
// Errors: every fallible call returns Status or Result; no exception escapes. A step that fails on one request
// finishes that request with FinishReason::kError and leaves the engine usable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <photon/chat_template.hpp>
#include <photon/export.hpp>
#include <photon/finish_reason.hpp>
#include <photon/sampling.hpp>
#include <photon/status.hpp>
#include <photon/tokenizer.hpp>

namespace photon {

/// How an engine is built. Zero means "choose" for the sizes marked so.
struct EngineConfig {
  /// A Hugging Face checkpoint folder, or "dummy:NAME" for a built-in shape with random weights.
  std::string model;
  /// "auto", "safetensors" or "dummy" (random weights for a folder holding just config.json).
  std::string load_format = "auto";
  /// "cpu", "cuda" (GPU 0) or "cuda:N".
  std::string device = "cpu";
  /// dtype of dummy weights: "bf16", "f16" or "f32".
  std::string dtype = "bf16";
  /// Weight quantization at load: "none" or "int8" (symmetric int8 with one scale per `group_size` consecutive
  /// input features, computed on the device that holds the weights, for every projection of every layer; the
  /// embedding and the norms stay in the checkpoint's dtype).
  std::string quantization = "none";
  /// Input features per int8 scale: 32, 64 or 128. With tensor parallelism it must divide each rank's share.
  int32_t group_size = 128;
  /// With int8: the LM head too, and the embedding when the model ties the two (one int8 table serves both).
  bool quantize_lm_head = false;
  /// KV cache dtype: "auto" (f32 on the CPU), "f32" or "bf16".
  std::string kv_cache_dtype = "auto";
  /// Bytes for the KV cache; 0 chooses from `memory_utilization`.
  uint64_t kv_cache_memory_bytes = 0;
  /// Fraction of the device's total memory the engine may use in all (weights, activations, KV cache) when
  /// kv_cache_memory_bytes is 0; memory others already use counts against it. 0 chooses 0.9 on a GPU, and on the
  /// CPU 0.5 (where "free" is MemAvailable from /proc/meminfo) with the KV cache capped at 4 GiB, or at one
  /// max_model_len sequence where that is larger. Either way the KV cache never takes more than max_num_seqs
  /// full-length sequences need.
  double memory_utilization = 0.0;
  /// GPUs (or, with device "cpu", threads) the model is split across, Megatron-style: attention heads, MLP
  /// features and the vocabulary are divided evenly, and each rank's KV cache holds its KV heads. With device
  /// "cuda:N" the ranks use GPUs N .. N + size - 1. The budgets above and num_kv_blocks are per rank.
  int32_t tensor_parallel_size = 1;
  /// Multi-process tensor parallelism — one process per rank, on one host or several: "host:port" where rank 0
  /// listens for the other ranks (every process gets the same address and tensor_parallel_size). Rank 0 creates the
  /// Engine; every other rank calls run_tensor_parallel_worker() with its own `rank`. NCCL on GPUs (its unique id
  /// travels over this connection), rank 0's relay on the CPU. Empty: all ranks are threads of this process.
  std::string dist_init_addr;
  /// This process's rank (0 .. tensor_parallel_size - 1) when dist_init_addr is set. On GPUs rank r uses GPU
  /// N + (r mod the GPUs from N on) for device "cuda:N" (N = 0 for "cuda").
  int32_t rank = 0;
  /// Exact number of KV blocks; overrides both budgets above when positive.
  int64_t num_kv_blocks = 0;
  /// Tokens per KV block.
  int32_t block_size = 16;
  /// Requests in one step at most.
  int32_t max_num_seqs = 64;
  /// Tokens in one step at most (prompt chunks plus decode tokens).
  int32_t max_num_batched_tokens = 512;
  /// Longest prompt + output of one request; 0 uses the model's max_position_embeddings.
  int32_t max_model_len = 0;
  /// Reuse the KV of prompt prefixes shared between requests.
  bool enable_prefix_caching = true;
  /// Run every step eagerly, never as a captured CUDA graph (for debugging and comparison).
  bool enforce_eager = false;
  /// Plan and enqueue each decode step before the previous step's sampled ids reach the host, so the GPU never
  /// waits for the host's bookkeeping between steps (the next step reads those ids on the device). Applies to steps
  /// whose every token is sampled on the device (no logprobs) on one rank; others run in turn. A
  /// request that stops has one token more computed, which is discarded. Outputs are identical either way.
  bool async_scheduling = true;
  /// Tensor parallelism over the GPUs of one process: all-reduce decode steps' small messages (up to 1 MiB) with a
  /// one-shot kernel over NVLink peer access instead of NCCL, where every pair of GPUs has peer access. The
  /// environment variable PHOTON_PEER_ALL_REDUCE=0 turns it off too (for experiments without a rebuild).
  bool peer_all_reduce = true;
  /// Seed of dummy weights and of requests that carry no seed.
  uint64_t seed = 0;
  /// A Jinja chat template file to use instead of the tokenizer folder's (tokenizer_config.json's chat_template);
  /// its special tokens (bos_token, ...) still come from that folder. Needs a tokenizer. "" for the folder's own.
  std::string chat_template;
  /// Tokenizer folder or tokenizer.json; "" uses the model folder's when it has one. Without a tokenizer the
  /// engine takes token ids only (no text prompts, text deltas or stop strings).
  std::string tokenizer;
  /// Called while weights load with (bytes done, bytes total); may be empty. Runs on the creating thread.
  std::function<void(uint64_t done, uint64_t total)> load_progress;
};

/// Serves one rank other than 0 of a multi-process tensor-parallel group (config.dist_init_addr and config.rank set,
/// the rest as rank 0's): joins the group, loads this rank's share of the weights, then runs every step rank 0
/// sends until rank 0's engine is destroyed. Blocks; returns ok when told to stop, or the first error (joining in
/// time, loading, a step, rank 0 going away without a word).
PHOTON_API Status run_tensor_parallel_worker(const EngineConfig& config);

/// Number of CUDA GPUs this process can use: 0 without a CUDA build, a driver or a GPU. Thread-safe.
PHOTON_API int cuda_device_count();

/// What sizes a CUDA GPU's defaults are chosen from.
struct CudaDeviceProperties {
  uint64_t total_memory_bytes = 0;  ///< the GPU's memory, in bytes
  int compute_capability = 0;       ///< major * 10 + minor: 80 for an A100, 90 for an H100 or H200
};

/// Properties of CUDA GPU `device` (0-based); all zero without a CUDA build, a driver or that GPU. Thread-safe.
PHOTON_API CudaDeviceProperties cuda_device_properties(int device);

/// What happened to one request since the previous poll().
struct RequestEvent {
  uint64_t request_id = 0;
  std::vector<int32_t> token_ids;      ///< tokens generated since the last event
  std::string text;                    ///< their text: whole UTF-8 characters only, stop strings never included
  std::vector<TokenLogprob> logprobs;  ///< one per token in token_ids when logprobs were requested
  /// Prompt logprobs for positions [prompt_logprobs_begin, ...): position 0 has none. Sent once computed.
  std::vector<TokenLogprob> prompt_logprobs;
  int32_t prompt_logprobs_begin = 1;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;  ///< why, when finish_reason is kError
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;         ///< generated so far, in total
  int32_t num_cached_prompt_tokens = 0;  ///< prompt tokens served by the prefix cache
  /// Seconds on the engine's steady clock: submission, first generated token (0 until then), finish (0 until then).
  double arrival_time = 0.0;
  double first_token_time = 0.0;
  double finish_time = 0.0;
};

/// A snapshot of the engine's state.
struct EngineStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int64_t num_preemptions = 0;
  int64_t num_steps = 0;
  int64_t prefix_cache_queries = 0;     ///< prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hit_tokens = 0;  ///< of which served from cache
  int64_t num_kv_blocks = 0;
  int64_t num_free_kv_blocks = 0;
  int32_t block_size = 0;
  int64_t kv_capacity_tokens = 0;  ///< tokens the whole KV cache holds
  double kv_usage = 0.0;           ///< fraction of KV blocks in use by requests
  uint64_t weight_bytes = 0;       ///< model weights resident on the device(s), all ranks together
  uint64_t kv_cache_bytes = 0;     ///< all ranks together
  uint64_t workspace_bytes = 0;    ///< activation buffers, all ranks together
  uint64_t peak_device_bytes = 0;  ///< most memory one device's allocator held at once (the largest rank)
  int64_t num_prompt_tokens = 0;   ///< computed so far (cache hits excluded)
  int64_t num_generated_tokens = 0;
};

/// Facts about the loaded model that callers need to build requests.
struct ModelInfo {
  std::string architecture;  ///< e.g. "LlamaForCausalLM"
  int64_t vocab_size = 0;
  int32_t max_model_len = 0;  ///< the engine's limit for prompt + output
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id;
  std::string device;              ///< e.g. "cuda:0"
  std::string device_description;  ///< e.g. "NVIDIA H200 (sm_90, 139.8 GiB)"
};

class PHOTON_API Engine {
 public:
  /// Loads the model and takes all memory (weights, activations, KV cache) up front. Errors say what to change,
  /// e.g. "the KV budget holds 812 tokens; lower max_model_len to 812 or raise memory_utilization"; a model whose
  /// weights alone exceed a device's memory is kOutOfMemory before any weight is loaded, naming the sizes and the
  /// ways out (more tensor-parallel GPUs, int8).
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Queues a request for `prompt` token ids; returns its id (unique for this engine). Rejects prompts that cannot
  /// fit (max_model_len, whole KV cache), ids outside the vocabulary and invalid parameters.
  Result<uint64_t> submit(std::vector<int32_t> prompt, const SamplingParams& params);
  /// Same for a text prompt, tokenized with the engine's tokenizer (special tokens such as BOS added as the
  /// tokenizer's post-processor says). kUnsupported without a tokenizer.
  Result<uint64_t> submit_text(std::string_view prompt, const SamplingParams& params);
  /// Same for a chat: `messages_json` (OpenAI-style messages, optionally with tools in `options`) rendered by the
  /// model's own chat template, then tokenized without adding special tokens again (the template places BOS).
  /// kUnsupported without a tokenizer or chat template.
  Result<uint64_t> submit_chat(std::string_view messages_json, const SamplingParams& params,
                               const ChatTemplate::Options& options = {}, std::string_view tools_json = {});
  /// The engine's tokenizer, or nullptr when it has none. Valid for the engine's lifetime.
  const Tokenizer* tokenizer() const;
  /// The chat template from the tokenizer folder's tokenizer_config.json, or nullptr when there is none.
  const ChatTemplate* chat_template() const;
  /// Ends a request at the next step boundary (its KV blocks are freed then); it reports kCancelled.
  /// kNotFound when the id is unknown or already finished.
  Status cancel(uint64_t request_id);
  /// One iteration: schedule, forward, sample, update, emit. With async scheduling the next step is planned and
  /// enqueued before this one's tokens are emitted, so a step() call may leave one step running on the device; the
  /// next call (or the destructor) completes it. Does nothing when no request is pending.
  Status step();
  /// Drains the events produced since the last call, in order.
  std::vector<RequestEvent> poll();
  /// True while any request is waiting or running (including ones submitted but not yet scheduled).
  bool has_unfinished_requests() const;
  EngineStats stats() const;
  const ModelInfo& model_info() const;

  /// Runs step() on an engine-owned thread whenever work is pending (idle otherwise). Idempotent.
  Status start();
  /// Stops and joins that thread; pending requests stay queued. Idempotent.
  void stop();
  /// Blocks until an event is available or `timeout_ms` passes; true when poll() has something.
  bool wait_for_events(int timeout_ms);

 private:
  Engine();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace photon
