// photon generate: one request end to end on the chosen device.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <photon/log.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "core/logging.hpp"
#include "cpu/cpu_backend.hpp"
#include "engine/sampler.hpp"
#include "models/decoder.hpp"
#include "models/model_loader.hpp"
#include "progress.hpp"

namespace photon::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

json logprob_json(const TokenLogprob& lp) {
  json top = json::array();
  for (const auto& [id, value] : lp.top) top.push_back({id, value});
  return {{"token", lp.token}, {"logprob", lp.logprob}, {"top", std::move(top)}};
}

struct GenerateOptions {
  ModelSource source;
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  bool ignore_eos = false;
  double temperature = 0.0;
  uint64_t seed = 0;
  std::optional<int> prompt_logprobs;
  std::optional<int> logprobs;
  int64_t chunk = 512;
  int64_t block_size = 16;
  DType kv_dtype = DType::kF32;
  bool json_output = false;
  bool stats = false;
};

Args make_args() {
  Args a("photon generate --model DIR|dummy:NAME --prompt-ids IDS [options]",
         "Generates a continuation of one prompt of token ids and prints the generated ids.");
  a.option("model", "DIR|dummy:NAME", "Hugging Face checkpoint folder (config.json + safetensors), or a built-in "
                                      "shape with random weights: dummy:llama-3.2-1b, dummy:llama-3.2-3b, "
                                      "dummy:llama-3.1-8b, dummy:qwen3-0.6b, dummy:qwen3-1.7b, dummy:qwen3-8b, "
                                      "dummy:tiny-llama3, dummy:tiny-qwen3");
  a.option("load-format", "auto|safetensors|dummy", "dummy: random weights for a folder holding only config.json",
           "auto");
  a.option("dtype", "bf16|f16|f32", "dtype of dummy weights", "bf16");
  a.option("device", "cpu|cuda", "where to run", "cpu");
  a.option("prompt-ids", "IDS", "prompt as comma-separated token ids, e.g. 128000,9906,1917");
  a.option("max-tokens", "N", "tokens to generate at most", "16");
  a.flag("ignore-eos", "keep generating past end-of-sequence tokens");
  a.option("temperature", "T", "0 for greedy; above 0 samples from softmax(logits / T)", "0");
  a.option("seed", "N", "seed of sampling and of dummy weights", "0");
  a.option("prompt-logprobs", "K", "report each prompt token's logprob and the top K at its position");
  a.option("logprobs", "K", "report each generated token's logprob and the top K");
  a.option("max-num-batched-tokens", "N", "tokens per forward pass (longer prompts are chunked)", "512");
  a.option("block-size", "N", "tokens per KV-cache block", "16");
  a.option("kv-cache-dtype", "f32|bf16", "dtype of the KV cache", "f32");
  a.option("threads", "N", "CPU threads (default: OpenMP's choice, usually all cores)");
  a.option("log-level", "LEVEL", "debug, info, warn, error or off", "warn");
  a.flag("json", "print one JSON object as the last stdout line");
  a.flag("stats", "print run statistics as JSON on the last stderr line");
  return a;
}

Status read_options(const Args& a, GenerateOptions& o) {
  if (!a.has("model")) return Status(StatusCode::kInvalidArgument, "option '--model' is required");
  o.source.model = a.get("model");
  const auto format = parse_load_format(a.get("load-format"));
  if (!format) {
    return Status(StatusCode::kInvalidArgument, fmt::format("option '--load-format' must be auto, safetensors or "
                                                            "dummy, not '{}'",
                                                            a.get("load-format")));
  }
  o.source.format = *format;
  const auto dtype = parse_dtype(a.get("dtype"));
  if (!dtype || !is_float_dtype(*dtype)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("option '--dtype' must be bf16, f16 or f32, not '{}'",
                                                            a.get("dtype")));
  }
  o.source.dummy_dtype = *dtype;
  const std::string device = a.get("device");
  if (device == "cuda") {
    return Status(StatusCode::kUnsupported, "this build of photon has no CUDA backend; use --device cpu");
  }
  if (device != "cpu") {
    return Status(StatusCode::kInvalidArgument, fmt::format("option '--device' must be cpu or cuda, not '{}'",
                                                            device));
  }
  if (!a.has("prompt-ids")) {
    return Status(StatusCode::kInvalidArgument, "option '--prompt-ids' is required (e.g. --prompt-ids 128000,9906)");
  }
  PHOTON_ASSIGN_OR_RETURN(o.prompt, a.get_int_list("prompt-ids"));
  PHOTON_ASSIGN_OR_RETURN(o.max_tokens, a.get_int("max-tokens", 0, 1 << 20));
  o.ignore_eos = a.has("ignore-eos");
  PHOTON_ASSIGN_OR_RETURN(o.temperature, a.get_double("temperature", 0.0, 100.0));
  PHOTON_ASSIGN_OR_RETURN(int64_t seed, a.get_int("seed", 0, INT64_MAX));
  o.seed = static_cast<uint64_t>(seed);
  o.source.seed = o.seed;
  if (a.has("prompt-logprobs")) {
    PHOTON_ASSIGN_OR_RETURN(int64_t k, a.get_int("prompt-logprobs", 0, 1000));
    o.prompt_logprobs = static_cast<int>(k);
  }
  if (a.has("logprobs")) {
    PHOTON_ASSIGN_OR_RETURN(int64_t k, a.get_int("logprobs", 0, 1000));
    o.logprobs = static_cast<int>(k);
  }
  PHOTON_ASSIGN_OR_RETURN(o.chunk, a.get_int("max-num-batched-tokens", 1, 1 << 20));
  PHOTON_ASSIGN_OR_RETURN(o.block_size, a.get_int("block-size", 1, 1024));
  const auto kv = parse_dtype(a.get("kv-cache-dtype"));
  if (!kv || (*kv != DType::kF32 && *kv != DType::kBF16)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("option '--kv-cache-dtype' must be f32 or bf16, not '{}'",
                                                            a.get("kv-cache-dtype")));
  }
  o.kv_dtype = *kv;
  if (a.has("threads")) {
    PHOTON_ASSIGN_OR_RETURN(int64_t threads, a.get_int("threads", 1, 4096));
    omp_set_num_threads(static_cast<int>(threads));
  }
  LogLevel level{};
  if (!parse_log_level(a.get("log-level"), &level)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("option '--log-level' must be debug, info, warn, error "
                                                            "or off, not '{}'",
                                                            a.get("log-level")));
  }
  set_log_level(level);
  o.json_output = a.has("json");
  o.stats = a.has("stats");
  return Status::ok();
}

Status generate(const GenerateOptions& o) {
  const auto t_load = Clock::now();
  CpuAllocator& allocator = default_cpu_allocator();
  auto backend = make_cpu_backend(allocator);
  LoadedModel model;
  {
    ProgressBar bar("loading");
    PHOTON_ASSIGN_OR_RETURN(model, load_model(o.source, *backend, [&](uint64_t d, uint64_t t) { bar.update(d, t); }));
  }
  const ModelConfig& config = model.config;
  const uint64_t weight_bytes = model.weights.bytes;
  const double load_s = seconds_since(t_load);

  if (o.prompt.empty()) return Status(StatusCode::kInvalidArgument, "the prompt is empty; give at least one token id");
  for (int32_t id : o.prompt) {
    if (id >= config.vocab_size) {
      return Status(StatusCode::kInvalidArgument, fmt::format("prompt token id {} is outside the vocabulary (0..{})",
                                                              id, config.vocab_size - 1));
    }
  }
  const auto prompt_len = static_cast<int64_t>(o.prompt.size());
  const int64_t total_len = prompt_len + o.max_tokens;
  if (total_len > config.max_position_embeddings) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("prompt ({} tokens) plus --max-tokens ({}) exceeds the model's context of {} tokens; "
                              "lower --max-tokens or shorten the prompt",
                              prompt_len, o.max_tokens, config.max_position_embeddings));
  }

  // One sequence: its blocks are simply 0..n-1 of a cache sized for it.
  const int64_t num_blocks = (total_len + o.block_size - 1) / o.block_size;
  PHOTON_ASSIGN_OR_RETURN(PagedKvCache kv,
                          PagedKvCache::create(config, *backend, num_blocks, o.block_size, o.kv_dtype));
  std::vector<int32_t> blocks(static_cast<size_t>(num_blocks));
  for (int64_t i = 0; i < num_blocks; ++i) blocks[static_cast<size_t>(i)] = static_cast<int32_t>(i);

  const bool want_prompt_logprobs = o.prompt_logprobs.has_value();
  DecoderLimits limits;
  limits.max_num_tokens = std::min(o.chunk, prompt_len);
  limits.max_num_seqs = 1;
  limits.max_num_logits = want_prompt_logprobs ? limits.max_num_tokens : 1;
  limits.max_num_blocks = num_blocks;
  PHOTON_ASSIGN_OR_RETURN(auto decoder, Decoder::create(config, std::move(model.weights), *backend, limits));

  json prompt_logprobs = want_prompt_logprobs ? json::array({nullptr}) : json(nullptr);
  json logprobs = o.logprobs ? json::array() : json(nullptr);
  std::vector<int32_t> output;
  std::mt19937_64 rng(o.seed);
  std::string finish_reason = "length";
  ForwardBatch batch;

  // Prefill, chunked by the token budget. Logits of every row when prompt logprobs are wanted, else the last row.
  const auto t_prefill = Clock::now();
  std::vector<float> next_logits(static_cast<size_t>(config.vocab_size));
  for (int64_t start = 0; start < prompt_len; start += limits.max_num_tokens) {
    const int64_t n = std::min(limits.max_num_tokens, prompt_len - start);
    const bool last_chunk = start + n == prompt_len;
    batch.clear();
    batch.add_sequence(std::span(o.prompt).subspan(static_cast<size_t>(start), static_cast<size_t>(n)),
                       static_cast<int32_t>(start), blocks, static_cast<int32_t>(o.block_size),
                       want_prompt_logprobs ? ForwardBatch::Logits::kAll
                                            : (last_chunk ? ForwardBatch::Logits::kLast : ForwardBatch::Logits::kNone));
    PHOTON_ASSIGN_OR_RETURN(Tensor logits, decoder->forward(batch, kv));
    const auto vocab = static_cast<size_t>(config.vocab_size);
    const float* rows = logits.data<float>();
    if (want_prompt_logprobs) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t pos = start + i;  // row i predicts prompt token pos + 1
        if (pos + 1 < prompt_len) {
          prompt_logprobs.push_back(logprob_json(token_logprob({rows + static_cast<size_t>(i) * vocab, vocab},
                                                               o.prompt[static_cast<size_t>(pos + 1)],
                                                               *o.prompt_logprobs)));
        }
      }
    }
    if (last_chunk) {
      const size_t row = want_prompt_logprobs ? static_cast<size_t>(n - 1) : 0;
      std::copy(rows + row * vocab, rows + (row + 1) * vocab, next_logits.begin());
    }
  }
  const double prefill_s = seconds_since(t_prefill);

  // Decode one token at a time.
  const auto t_decode = Clock::now();
  for (int64_t step = 0; step < o.max_tokens; ++step) {
    const int32_t token = sample_token(next_logits, static_cast<float>(o.temperature), rng);
    output.push_back(token);
    if (o.logprobs) logprobs.push_back(logprob_json(token_logprob(next_logits, token, *o.logprobs)));
    const bool is_eos = std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), token) !=
                        config.eos_token_ids.end();
    if (is_eos && !o.ignore_eos) {
      finish_reason = "stop";
      break;
    }
    if (step + 1 == o.max_tokens) break;
    batch.clear();
    batch.add_sequence(std::span(&output.back(), 1), static_cast<int32_t>(prompt_len + step), blocks,
                       static_cast<int32_t>(o.block_size), ForwardBatch::Logits::kLast);
    PHOTON_ASSIGN_OR_RETURN(Tensor logits, decoder->forward(batch, kv));
    std::copy(logits.data<float>(), logits.data<float>() + config.vocab_size, next_logits.begin());
  }
  const double decode_s = seconds_since(t_decode);

  if (o.json_output) {
    json out = {{"prompt_ids", o.prompt},           {"output_ids", output},
                {"finish_reason", finish_reason},   {"prompt_logprobs", prompt_logprobs},
                {"logprobs", logprobs}};
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("output_ids: {}\nfinish_reason: {}\n", fmt::join(output, ","), finish_reason);
  }
  std::fflush(stdout);
  if (o.stats) {
    const double decode_steps = static_cast<double>(output.empty() ? 0 : output.size() - 1);
    json stats = {{"device", "cpu"},
                  {"model", o.source.model},
                  {"weight_bytes", weight_bytes},
                  {"kv_cache_bytes", kv.bytes()},
                  {"workspace_bytes", decoder->workspace_bytes()},
                  {"peak_host_bytes", allocator.peak_bytes()},
                  {"load_s", load_s},
                  {"prompt_tokens", prompt_len},
                  {"output_tokens", output.size()},
                  {"prefill_s", prefill_s},
                  {"decode_s", decode_s},
                  {"prefill_tok_per_s", prefill_s > 0 ? static_cast<double>(prompt_len) / prefill_s : 0.0},
                  {"decode_tok_per_s", decode_s > 0 ? decode_steps / decode_s : 0.0},
                  {"threads", omp_get_max_threads()}};
    fmt::print(stderr, "{}\n", stats.dump());
  }
  return Status::ok();
}

}  // namespace

int run_generate(int argc, char** argv) {
  Args args = make_args();
  if (Status s = args.parse(argc, argv, 2); !s) {
    fmt::print(stderr, "photon generate: error: {}\n", s.message());
    return 2;
  }
  if (args.help_requested()) {
    fmt::print("{}", args.help_text());
    return 0;
  }
  GenerateOptions options;
  if (Status s = read_options(args, options); !s) {
    fmt::print(stderr, "photon generate: error: {}\n", s.message());
    return 2;
  }
  if (Status s = generate(options); !s) {
    fmt::print(stderr, "photon generate: error: {}\n", s.message());
    return 1;
  }
  return 0;
}

}  // namespace photon::cli
