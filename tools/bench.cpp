// photon bench: offline throughput and latency. N requests of random prompt ids (length I) each generate exactly O
// tokens (EOS ignored), all submitted at once after a warm-up; prints a table, and with --json a last stdout line:
// {"num_prompts", "input_len", "output_len", "elapsed_s", "output_tok_per_s", "total_tok_per_s",
//  "ttft_ms": {"p50", "p90", "p99"}, "tpot_ms": {...}, "peak_device_bytes", "device", "weight_bytes",
//  "kv_bytes_per_token" (all layers' keys and values of one token), "max_num_seqs", "max_num_batched_tokens", ...}.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <photon/engine.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "engine_flags.hpp"
#include "latency_stats.hpp"
#include "progress.hpp"
#include "sampling_flags.hpp"

namespace photon::cli {
namespace {

// vLLM's offline defaults: 256 sequences and 8,192 tokens a step, 1,024 and 16,384 on large GPUs.
constexpr EngineFlagDefaults kEngineDefaults{"auto", 256, 8192, 1024, 16384};

using nlohmann::json;
using Clock = std::chrono::steady_clock;

Args make_args() {
  Args a("photon bench --model M --num-prompts N --input-len I --output-len O [options]",
         "Offline benchmark: N requests of I random prompt tokens, each generating exactly O tokens, run through "
         "continuous batching after a warm-up. Reports throughput, time to first token (TTFT) and time per output "
         "token (TPOT).");
  add_engine_flags(a, kEngineDefaults);
  a.option("num-prompts", "N", "requests to run");
  a.option("input-len", "I", "prompt tokens per request");
  a.option("output-len", "O", "generated tokens per request (EOS ignored)");
  add_sampling_flags(a);  // every request samples this way
  a.option("logprobs", "K", "every request also reports each generated token's logprob and the top K");
  a.flag("json", "print the results as one JSON object on the last stdout line");
  return a;
}

struct Options {
  EngineConfig config;
  int64_t num_prompts = 0, input_len = 0, output_len = 0;
  SamplingParams sampling;  // temperature, top-k, top-p, min-p, penalties and logprobs of every request
  bool json_output = false;
};

Status read_options(const Args& a, Options& o) {
  PHOTON_RETURN_IF_ERROR(read_engine_config(a, kEngineDefaults, o.config));
  for (const char* required : {"num-prompts", "input-len", "output-len"}) {
    if (!a.has(required))
      return Status(StatusCode::kInvalidArgument, fmt::format("option '--{}' is required", required));
  }
  PHOTON_ASSIGN_OR_RETURN(o.num_prompts, a.get_int("num-prompts", 1, 1 << 20));
  PHOTON_ASSIGN_OR_RETURN(o.input_len, a.get_int("input-len", 1, 1 << 20));
  PHOTON_ASSIGN_OR_RETURN(o.output_len, a.get_int("output-len", 1, 1 << 20));
  if (o.config.max_model_len == 0) o.config.max_model_len = static_cast<int32_t>(o.input_len + o.output_len);
  PHOTON_RETURN_IF_ERROR(read_sampling_flags(a, o.sampling));
  if (a.has("logprobs")) {
    PHOTON_ASSIGN_OR_RETURN(const int64_t k, a.get_int("logprobs", 0, 20));
    o.sampling.logprobs = static_cast<int32_t>(k);
  }
  o.json_output = a.has("json");
  return Status::ok();
}

Status run(Options o) {
  // Ranks other than 0 of a multi-process group serve rank 0, which runs the benchmark and prints it.
  if (o.config.rank > 0) return run_tensor_parallel_worker(o.config);
  double load_s = 0.0;
  PHOTON_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, load_engine(o.config, load_s));
  const ModelInfo& info = engine->model_info();
  std::mt19937_64 rng(o.config.seed + 12345);
  auto random_prompt = [&](int64_t n) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(info.vocab_size));
    return p;
  };
  SamplingParams params = o.sampling;
  params.ignore_eos = true;

  // Warm-up: sixteen short requests together, then four, then one alone, compile the GEMM plans of small batches,
  // touch every buffer once and run every kernel of a large, a small and a one-sequence step once, so that no
  // measured step loads a kernel's module (CUDA loads them lazily, at first use: ~25 ms for the one-row int8 GEMV's,
  // docs/performance.md, 2026-12-04; 75-110 ms of TTFT for int8 weights' widening path when no warm-up prompt step
  // exceeded 256 rows, 2026-12-06). No longer than the measured requests, which max_model_len may fit exactly.
  params.max_tokens = static_cast<int32_t>(std::min<int64_t>(4, o.output_len));
  for (const int requests : {16, 4, 1}) {
    for (int i = 0; i < requests; ++i) {
      auto id = engine->submit(random_prompt(std::min<int64_t>(o.input_len, 32)), params);
      if (!id) return id.status();
    }
    while (engine->has_unfinished_requests()) PHOTON_RETURN_IF_ERROR(engine->step());
    (void)engine->poll();
  }

  params.max_tokens = static_cast<int32_t>(o.output_len);
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < o.num_prompts; ++i) prompts.push_back(random_prompt(o.input_len));
  const auto start = Clock::now();
  for (auto& p : prompts) {
    auto id = engine->submit(std::move(p), params);
    if (!id) return id.status();
  }
  std::vector<double> ttft_ms, tpot_ms;
  int64_t generated = 0, done = 0;
  ProgressBar bar("requests");
  while (engine->has_unfinished_requests()) {
    PHOTON_RETURN_IF_ERROR(engine->step());
    for (const RequestEvent& e : engine->poll()) {
      generated += static_cast<int64_t>(e.token_ids.size());
      if (!e.finished) continue;
      if (e.finish_reason != FinishReason::kLength) {
        return Status(StatusCode::kInternal, fmt::format("request {} ended with '{}': {}", e.request_id,
                                                         finish_reason_name(e.finish_reason), e.error));
      }
      ++done;
      ttft_ms.push_back((e.first_token_time - e.arrival_time) * 1e3);
      if (e.num_output_tokens > 1) {
        tpot_ms.push_back((e.finish_time - e.first_token_time) * 1e3 / (e.num_output_tokens - 1));
      }
    }
    bar.update(static_cast<uint64_t>(done), static_cast<uint64_t>(o.num_prompts));
  }
  bar.finish();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const EngineStats stats = engine->stats();
  const double out_tps = static_cast<double>(generated) / elapsed;
  const double total_tps = static_cast<double>(o.num_prompts * o.input_len + generated) / elapsed;
  const json ttft = latency_summary(ttft_ms, false), tpot = latency_summary(tpot_ms, false);
  const int tp = o.config.tensor_parallel_size;
  const std::string device = tp > 1 ? fmt::format("{} x {}", tp, info.device_description) : info.device_description;

  fmt::print("model            {}\n", o.config.model);
  fmt::print("device           {}\n", device);
  fmt::print("requests         {} x ({} in, {} out), max {} running, {} tokens per step\n", o.num_prompts, o.input_len,
             o.output_len, o.config.max_num_seqs, o.config.max_num_batched_tokens);
  fmt::print("elapsed          {:.3f} s over {} steps, {} preemptions\n", elapsed, stats.num_steps,
             stats.num_preemptions);
  fmt::print("output tokens/s  {:.1f}\n", out_tps);
  fmt::print("total tokens/s   {:.1f}\n", total_tps);
  auto row = [](const char* name, const json& p) {
    if (p["p50"].is_null()) return;
    fmt::print("{:<17}p50 {:.2f}  p90 {:.2f}  p99 {:.2f}\n", name, p["p50"].get<double>(), p["p90"].get<double>(),
               p["p99"].get<double>());
  };
  row("TTFT ms", ttft);
  row("TPOT ms", tpot);
  fmt::print("memory           weights {:.2f} GB, KV cache {:.2f} GB ({} tokens), peak {:.2f} GB\n",
             static_cast<double>(stats.weight_bytes) / 1e9, static_cast<double>(stats.kv_cache_bytes) / 1e9,
             stats.kv_capacity_tokens, static_cast<double>(stats.peak_device_bytes) / 1e9);
  if (o.json_output) {
    const uint64_t kv_bytes_per_token =
        stats.kv_capacity_tokens > 0 ? stats.kv_cache_bytes / static_cast<uint64_t>(stats.kv_capacity_tokens) : 0;
    const json out = {{"num_prompts", o.num_prompts},
                      {"input_len", o.input_len},
                      {"output_len", o.output_len},
                      {"elapsed_s", elapsed},
                      {"output_tok_per_s", out_tps},
                      {"total_tok_per_s", total_tps},
                      {"ttft_ms", ttft},
                      {"tpot_ms", tpot},
                      {"peak_device_bytes", stats.peak_device_bytes},
                      {"device", device},
                      {"weight_bytes", stats.weight_bytes},
                      {"kv_bytes_per_token", kv_bytes_per_token},
                      {"load_s", load_s},
                      {"quantization", o.config.quantization},
                      {"group_size", o.config.quantization == "int8" ? o.config.group_size : 0},
                      {"quantize_lm_head", o.config.quantize_lm_head},
                      {"tensor_parallel_size", tp},
                      {"max_num_seqs", o.config.max_num_seqs},
                      {"max_num_batched_tokens", o.config.max_num_batched_tokens},
                      {"num_steps", stats.num_steps},
                      {"num_preemptions", stats.num_preemptions}};
    fmt::print("{}\n", out.dump());
  }
  std::fflush(stdout);
  return Status::ok();
}

}  // namespace

int run_bench(int argc, char** argv) {
#if defined(PHOTON_WITH_SERVER)
  if (argc > 2 && std::string_view(argv[2]) == "serve") return run_bench_serve(argc, argv);
#endif
  Args args = make_args();
  Options options;
  return run_command(
      args, argc, argv, 2, "photon bench", [&] { return read_options(args, options); },
      [&] { return run(std::move(options)); });
}

}  // namespace photon::cli
