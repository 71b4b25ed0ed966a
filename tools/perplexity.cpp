// photon perplexity: the perplexity of a model over a text file, computed the way llama.cpp's llama-perplexity does
// (so its figures and ours compare, e.g. bf16 against int8 weights on wikitext-2's test set): the file's tokens
// (BOS first where the tokenizer adds one) cut into chunks of --context-len tokens, each chunk's first token replaced
// by BOS, each chunk run as one prompt, and the second half of every chunk scored, so that each scored token has at
// least half a context before it. Chunks are independent requests: the engine batches them like any others.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <photon/engine.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "engine_flags.hpp"
#include "progress.hpp"

namespace photon::cli {
namespace {

// A step computes at most 512 rows of logits for prompt logprobs (one a scored position), whatever the token
// budget: 512 tokens a step, on every device.
constexpr EngineFlagDefaults kEngineDefaults{"auto", 64, 512, 64, 512};

using nlohmann::json;
using Clock = std::chrono::steady_clock;

Args make_args() {
  Args a("photon perplexity --model DIR|dummy:NAME --file TEXT [--context-len N] [--max-chunks N] [options]",
         "Perplexity of the model over a UTF-8 text file, as llama.cpp's llama-perplexity computes it: the tokens "
         "are cut into chunks of --context-len, each chunk starts with BOS (where the tokenizer adds one) and the "
         "second half of each chunk is scored. Prints the estimate with its standard error; --json prints the "
         "figures as one JSON object. Compare weights (e.g. --quantization int8 against none) on the same file and "
         "context length.");
  a.option("file", "TEXT", "the text to score (e.g. wikitext-2-raw's wiki.test.raw)");
  a.option("context-len", "N",
           "tokens per chunk (each chunk is one prompt; half of it is scored; --max-model-len defaults to N + 1)",
           "512");
  a.option("max-chunks", "N", "score at most the first N chunks (default: every whole chunk of the file)");
  add_engine_flags(a, kEngineDefaults);
  a.flag("json", "print the result as one JSON object on stdout");
  return a;
}

Status bad(std::string message) { return Status(StatusCode::kInvalidArgument, std::move(message)); }

struct Options {
  std::string file;
  int32_t context_len = 512;
  int64_t max_chunks = -1;  // every chunk
};

Status read_options(const Args& a, EngineConfig& config, Options& o) {
  if (!a.has("file")) return bad("option '--file' is required: the text file to score");
  o.file = a.get("file");
  PHOTON_ASSIGN_OR_RETURN(int64_t context, a.get_int("context-len", 4, 1 << 20));
  o.context_len = static_cast<int32_t>(context);
  if (a.has("max-chunks")) {
    PHOTON_ASSIGN_OR_RETURN(o.max_chunks, a.get_int("max-chunks", 1, int64_t{1} << 40));
  }
  PHOTON_RETURN_IF_ERROR(read_engine_config(a, kEngineDefaults, config));
  // A chunk is a prompt of context_len tokens plus the one token every request generates.
  if (!a.has("max-model-len")) config.max_model_len = o.context_len + 1;
  if (config.max_model_len < o.context_len + 1) {
    return bad(fmt::format("'--context-len {}' needs '--max-model-len' of at least {} (a chunk plus one token)",
                           o.context_len, o.context_len + 1));
  }
  return Status::ok();
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kNotFound, fmt::format("cannot open text file '{}'", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status(StatusCode::kIoError, fmt::format("cannot read text file '{}'", path));
  return text.str();
}

// Sums of the scored tokens' negative log-likelihoods (and their squares, for the standard error).
struct Sums {
  double nll = 0.0;
  double nll2 = 0.0;
  int64_t count = 0;
};

Status run(const Args& a, EngineConfig config, const Options& o) {
  if (config.rank > 0) return run_tensor_parallel_worker(config);
  PHOTON_ASSIGN_OR_RETURN(std::string text, read_text(o.file));
  double load_s = 0.0;
  PHOTON_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, load_engine(config, load_s));
  const Tokenizer* tokenizer = engine->tokenizer();
  if (tokenizer == nullptr) {
    return bad("perplexity needs a tokenizer: give --tokenizer DIR, or a model folder that holds tokenizer.json");
  }
  const std::vector<int32_t> tokens = tokenizer->encode(text, /*add_special_tokens=*/true);
  const std::vector<int32_t> bos = tokenizer->encode("", /*add_special_tokens=*/true);
  const int64_t n = o.context_len;
  int64_t chunks = static_cast<int64_t>(tokens.size()) / n;
  if (chunks == 0) {
    return bad(
        fmt::format("'{}' holds {} tokens, fewer than one chunk of {}: give a longer text or a smaller "
                    "'--context-len'",
                    o.file, tokens.size(), n));
  }
  if (o.max_chunks > 0 && o.max_chunks < chunks) chunks = o.max_chunks;

  // Every chunk at once; the scheduler admits them as the KV cache allows. Prompt logprobs give, at position i,
  // log p(token i | tokens before it): the scored tokens are positions n / 2 + 1 to n - 1, as llama.cpp scores them.
  SamplingParams params;
  params.max_tokens = 1;
  params.temperature = 0.0f;
  params.ignore_eos = true;
  params.prompt_logprobs = 0;
  const int64_t first = n / 2 + 1;
  std::map<uint64_t, int64_t> chunk_of;
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<int32_t> prompt(tokens.begin() + c * n, tokens.begin() + (c + 1) * n);
    if (bos.size() == 1) prompt[0] = bos[0];
    PHOTON_ASSIGN_OR_RETURN(uint64_t id, engine->submit(prompt, params));
    chunk_of[id] = c;
  }
  const auto t_run = Clock::now();
  Sums sums;
  int64_t done = 0;
  ProgressBar bar("scoring");
  while (engine->has_unfinished_requests()) {
    (void)engine->step();  // a failed step finishes its requests with an error, reported below
    for (RequestEvent& e : engine->poll()) {
      for (size_t j = 0; j < e.prompt_logprobs.size(); ++j) {
        if (e.prompt_logprobs_begin + static_cast<int64_t>(j) < first) continue;
        const double nll = -e.prompt_logprobs[j].logprob;
        sums.nll += nll;
        sums.nll2 += nll * nll;
        ++sums.count;
      }
      if (e.finished) {
        if (e.finish_reason == FinishReason::kError) {
          return Status(StatusCode::kInternal,
                        fmt::format("chunk {} failed: {}", chunk_of.at(e.request_id) + 1, e.error));
        }
        bar.update(static_cast<uint64_t>(++done), static_cast<uint64_t>(chunks));
      }
    }
  }
  bar.finish();
  const double run_s = std::chrono::duration<double>(Clock::now() - t_run).count();
  const int64_t expected = chunks * (n - first);
  if (sums.count != expected) {
    return Status(StatusCode::kInternal,
                  fmt::format("scored {} tokens where {} chunks of {} give {}", sums.count, chunks, n, expected));
  }

  // perplexity = exp(mean NLL); its standard error from the NLLs' variance (the delta method, as llama.cpp).
  const double mean = sums.nll / static_cast<double>(sums.count);
  const double ppl = std::exp(mean);
  const double variance = sums.nll2 / static_cast<double>(sums.count) - mean * mean;
  const double stderr_ppl =
      sums.count > 1 && variance > 0 ? ppl * std::sqrt(variance / static_cast<double>(sums.count - 1)) : 0.0;
  const double prompt_tok_per_s = run_s > 0 ? static_cast<double>(chunks * n) / run_s : 0.0;
  if (a.has("json")) {
    const json result = {{"model", config.model},
                         {"device", engine->model_info().device},
                         {"quantization", config.quantization},
                         {"group_size", config.quantization == "int8" ? config.group_size : 0},
                         {"file", o.file},
                         {"file_tokens", tokens.size()},
                         {"context_len", n},
                         {"chunks", chunks},
                         {"tokens_scored", sums.count},
                         {"mean_nll", mean},
                         {"perplexity", ppl},
                         {"perplexity_stderr", stderr_ppl},
                         {"load_s", load_s},
                         {"run_s", run_s},
                         {"prompt_tok_per_s", prompt_tok_per_s}};
    fmt::print("{}\n", result.dump());
  } else {
    fmt::print("perplexity {:.4f} +/- {:.4f} ({} tokens scored in {} chunk{} of {}; {:.0f} tokens/s)\n", ppl,
               stderr_ppl, sums.count, chunks, chunks == 1 ? "" : "s", n, prompt_tok_per_s);
  }
  return Status::ok();
}

}  // namespace

int run_perplexity(int argc, char** argv) {
  Args args = make_args();
  EngineConfig config;
  Options options;
  return run_command(
      args, argc, argv, 2, "photon perplexity", [&] { return read_options(args, config, options); },
      [&] { return run(args, std::move(config), options); });
}

}  // namespace photon::cli
