// photon generate: one request from flags, or a batch from a JSON Lines file, run through the Engine with
// continuous batching. Output: one JSON line per request (in input order) with --json or --requests.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <photon/engine.hpp>
#include <photon/log.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "engine_flags.hpp"
#include "sampling_flags.hpp"

namespace photon::cli {
namespace {

// A few prompts at a time: the same limits on every device.
constexpr EngineFlagDefaults kEngineDefaults{"cpu", 64, 512, 64, 512};

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Job {
  std::vector<int32_t> prompt;
  std::optional<std::string> text;  // a text prompt, tokenized by the engine
  SamplingParams params;
};

struct Outcome {
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  std::string text;
  json logprobs = nullptr;
  json prompt_logprobs = nullptr;
  std::string finish_reason;
  std::string error;
};

json logprob_json(const TokenLogprob& lp) {
  json top = json::array();
  for (const auto& [id, value] : lp.top) top.push_back({id, value});
  return {{"token", lp.token}, {"logprob", lp.logprob}, {"top", std::move(top)}};
}

Args make_args() {
  Args a("photon generate --model DIR|dummy:NAME (--prompt TEXT | --prompt-ids IDS | --requests FILE) [options]",
         "Generates continuations of token-id prompts through the engine (continuous batching over a paged KV "
         "cache). One request comes from --prompt-ids and the sampling flags; --requests runs a JSON Lines file of "
         "requests at once and prints one JSON line per request, in input order.");
  a.option("prompt-ids", "IDS", "prompt as comma-separated token ids, e.g. 128000,9906,1917");
  a.option("prompt", "TEXT", "prompt as text (needs a tokenizer: the model folder's, or --tokenizer)");
  a.flag("chat", "send --prompt as one user message through the model's chat template");
  a.option("stop", "TEXT", "a stop string: generation ends before it (needs a tokenizer)");
  a.option("requests", "FILE.jsonl",
           "batch mode: one request per line, {\"prompt_ids\":[...]} plus sampling fields "
           "(max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, "
           "presence_penalty, frequency_penalty, seed, ignore_eos, stop, stop_token_ids, "
           "logprobs, prompt_logprobs, logit_bias, priority); {\"prompt\":\"text\"} needs a "
           "tokenizer; missing fields take the flags' values");
  a.option("max-tokens", "N", "tokens to generate at most", "16");
  a.flag("ignore-eos", "keep generating past end-of-sequence tokens");
  add_sampling_flags(a);
  a.option("stop-token-ids", "IDS", "extra comma-separated ids that end a request");
  a.option("prompt-logprobs", "K", "report each prompt token's logprob and the top K at its position");
  a.option("logprobs", "K", "report each generated token's logprob and the top K");
  add_engine_flags(a, kEngineDefaults);
  a.flag("json", "print one JSON object per request as the last stdout line(s)");
  a.flag("stats", "print run statistics as JSON on the last stderr line");
  return a;
}

Status bad(std::string message) { return Status(StatusCode::kInvalidArgument, std::move(message)); }

// Request defaults from the flags; request lines override them field by field.
Status read_request_defaults(const Args& a, SamplingParams& p) {
  PHOTON_ASSIGN_OR_RETURN(int64_t max_tokens, a.get_int("max-tokens", 1, 1 << 24));
  p.max_tokens = static_cast<int32_t>(max_tokens);
  p.ignore_eos = a.has("ignore-eos");
  PHOTON_RETURN_IF_ERROR(read_sampling_flags(a, p));
  if (a.has("stop")) p.stop.push_back(a.get("stop"));
  if (a.has("stop-token-ids")) {
    PHOTON_ASSIGN_OR_RETURN(p.stop_token_ids, a.get_int_list("stop-token-ids"));
  }
  if (a.has("prompt-logprobs")) {
    PHOTON_ASSIGN_OR_RETURN(int64_t n, a.get_int("prompt-logprobs", 0, 20));
    p.prompt_logprobs = static_cast<int32_t>(n);
  }
  if (a.has("logprobs")) {
    PHOTON_ASSIGN_OR_RETURN(int64_t n, a.get_int("logprobs", 0, 20));
    p.logprobs = static_cast<int32_t>(n);
  }
  return Status::ok();
}

// One line of a --requests file.
Result<Job> parse_request_line(const std::string& line, const SamplingParams& defaults) {
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  Job job;
  job.params = defaults;
  SamplingParams& p = job.params;
  auto number = [&](const json& v, const std::string& key) -> Result<double> {
    if (!v.is_number()) return bad(fmt::format("'{}' must be a number", key));
    return v.get<double>();
  };
  auto integer = [&](const json& v, const std::string& key) -> Result<int64_t> {
    if (!v.is_number_integer()) return bad(fmt::format("'{}' must be an integer", key));
    return v.get<int64_t>();
  };
  auto id_list = [&](const json& v, const std::string& key) -> Result<std::vector<int32_t>> {
    std::vector<int32_t> ids;
    if (!v.is_array()) return bad(fmt::format("'{}' must be an array of token ids", key));
    for (const json& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX) {
        return bad(fmt::format("'{}' must hold non-negative integer token ids", key));
      }
      ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
    return ids;
  };
  bool has_prompt = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = *it;
    if (k == "prompt_ids") {
      PHOTON_ASSIGN_OR_RETURN(job.prompt, id_list(v, k));
      has_prompt = true;
    } else if (k == "prompt") {
      if (!v.is_string()) return bad("'prompt' must be a string");
      job.text = v.get<std::string>();
      has_prompt = true;
    } else if (k == "max_tokens") {
      PHOTON_ASSIGN_OR_RETURN(int64_t n, integer(v, k));
      if (n < 1 || n > (1 << 24)) return bad("'max_tokens' must be from 1 to 16777216");
      p.max_tokens = static_cast<int32_t>(n);
    } else if (k == "temperature") {
      PHOTON_ASSIGN_OR_RETURN(double x, number(v, k));
      p.temperature = static_cast<float>(x);
    } else if (k == "top_k") {
      PHOTON_ASSIGN_OR_RETURN(int64_t n, integer(v, k));
      if (n < -1 || n > INT32_MAX) return bad("'top_k' must be -1, 0 or positive");
      p.top_k = static_cast<int32_t>(n);
    } else if (k == "top_p") {
      PHOTON_ASSIGN_OR_RETURN(double x, number(v, k));
      p.top_p = static_cast<float>(x);
    } else if (k == "min_p") {
      PHOTON_ASSIGN_OR_RETURN(double x, number(v, k));
      p.min_p = static_cast<float>(x);
    } else if (k == "repetition_penalty") {
      PHOTON_ASSIGN_OR_RETURN(double x, number(v, k));
      p.repetition_penalty = static_cast<float>(x);
    } else if (k == "presence_penalty") {
      PHOTON_ASSIGN_OR_RETURN(double x, number(v, k));
      p.presence_penalty = static_cast<float>(x);
    } else if (k == "frequency_penalty") {
      PHOTON_ASSIGN_OR_RETURN(double x, number(v, k));
      p.frequency_penalty = static_cast<float>(x);
    } else if (k == "seed") {
      if (v.is_null()) {
        p.seed.reset();
      } else {
        if (!v.is_number_unsigned()) return bad("'seed' must be a non-negative integer");
        p.seed = v.get<uint64_t>();
      }
    } else if (k == "ignore_eos") {
      if (!v.is_boolean()) return bad("'ignore_eos' must be true or false");
      p.ignore_eos = v.get<bool>();
    } else if (k == "stop_token_ids") {
      PHOTON_ASSIGN_OR_RETURN(p.stop_token_ids, id_list(v, k));
    } else if (k == "stop") {
      p.stop.clear();
      if (v.is_string()) {
        p.stop.push_back(v.get<std::string>());
      } else if (v.is_array()) {
        for (const json& x : v) {
          if (!x.is_string()) return bad("'stop' must be a string or an array of strings");
          p.stop.push_back(x.get<std::string>());
        }
      } else if (!v.is_null()) {
        return bad("'stop' must be a string or an array of strings");
      }
    } else if (k == "logprobs" || k == "prompt_logprobs") {
      std::optional<int32_t>& field = k == "logprobs" ? p.logprobs : p.prompt_logprobs;
      if (v.is_null()) {
        field.reset();
      } else {
        PHOTON_ASSIGN_OR_RETURN(int64_t n, integer(v, k));
        if (n < 0 || n > 20) return bad(fmt::format("'{}' must be from 0 to 20", k));
        field = static_cast<int32_t>(n);
      }
    } else if (k == "logit_bias") {  // OpenAI's form: {"token id": bias}
      if (!v.is_object()) return bad("'logit_bias' must be an object of \"token id\": bias");
      p.logit_bias.clear();
      for (auto b = v.begin(); b != v.end(); ++b) {
        const std::string& id = b.key();
        if (id.empty() || id.size() > 10 || id.find_first_not_of("0123456789") != std::string::npos ||
            std::stoll(id) > INT32_MAX || !b->is_number()) {
          return bad(fmt::format("'logit_bias' must map token ids to numbers, not \"{}\": {}", id, b->dump()));
        }
        p.logit_bias.emplace_back(static_cast<int32_t>(std::stoll(id)), b->get<float>());
      }
    } else if (k == "priority") {
      PHOTON_ASSIGN_OR_RETURN(int64_t n, integer(v, k));
      if (n < INT32_MIN || n > INT32_MAX) return bad("'priority' is out of range");
      p.priority = static_cast<int32_t>(n);
    } else {
      return bad(fmt::format("unknown field '{}'", k));
    }
  }
  if (!has_prompt) return bad("each request needs 'prompt_ids' or 'prompt'");
  if (j.contains("prompt_ids") && j.contains("prompt")) return bad("give 'prompt_ids' or 'prompt', not both");
  return job;
}

Result<std::vector<Job>> read_requests_file(const std::string& path, const SamplingParams& defaults) {
  std::ifstream in(path);
  if (!in) return Status(StatusCode::kNotFound, fmt::format("cannot open requests file '{}'", path));
  std::vector<Job> jobs;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto job = parse_request_line(line, defaults);
    if (!job) return job.status().with_context(fmt::format("{}:{}", path, line_no));
    jobs.push_back(std::move(*job));
  }
  if (jobs.empty()) return bad(fmt::format("'{}' holds no requests", path));
  return jobs;
}

json outcome_json(const Outcome& o, bool with_text) {
  json j = {{"prompt_ids", o.prompt},
            {"output_ids", o.output},
            {"finish_reason", o.finish_reason},
            {"prompt_logprobs", o.prompt_logprobs},
            {"logprobs", o.logprobs}};
  if (with_text) j["text"] = o.text;
  if (!o.error.empty()) j["error"] = o.error;
  return j;
}

// Everything the flags and the requests file say; errors here are usage errors.
Status read_options(const Args& a, EngineConfig& config, std::vector<Job>& jobs) {
  PHOTON_RETURN_IF_ERROR(read_engine_config(a, kEngineDefaults, config));
  SamplingParams defaults;
  PHOTON_RETURN_IF_ERROR(read_request_defaults(a, defaults));
  if (a.has("requests") + a.has("prompt-ids") + a.has("prompt") != 1) {
    return bad("give exactly one of '--prompt-ids' or '--prompt' (one request) and '--requests FILE' (a batch)");
  }
  if (a.has("requests")) {
    PHOTON_ASSIGN_OR_RETURN(jobs, read_requests_file(a.get("requests"), defaults));
  } else {
    Job job;
    if (a.has("chat") && !a.has("prompt")) return bad("'--chat' needs '--prompt TEXT'");
    if (a.has("prompt")) {
      job.text = a.get("prompt");
    } else {
      PHOTON_ASSIGN_OR_RETURN(job.prompt, a.get_int_list("prompt-ids"));
    }
    job.params = defaults;
    jobs.push_back(std::move(job));
  }
  return Status::ok();
}

Status run(const Args& a, EngineConfig config, const std::vector<Job>& jobs) {
  // Ranks other than 0 of a multi-process group serve rank 0, which runs the requests and prints them.
  if (config.rank > 0) return run_tensor_parallel_worker(config);
  double load_s = 0.0;
  PHOTON_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, load_engine(config, load_s));

  // Submit everything up front; a rejected request reports its error in its own output line.
  std::vector<Outcome> outcomes(jobs.size());
  std::map<uint64_t, size_t> index_of;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].params.logprobs) outcomes[i].logprobs = json::array();
    if (jobs[i].params.prompt_logprobs) outcomes[i].prompt_logprobs = json::array({nullptr});
    outcomes[i].prompt = jobs[i].prompt;
    if (jobs[i].text) {
      if (engine->tokenizer() == nullptr) {
        return Status(StatusCode::kInvalidArgument,
                      "a text prompt needs a tokenizer: give --tokenizer DIR, or a "
                      "model folder that holds tokenizer.json");
      }
      if (a.has("chat")) {
        if (engine->chat_template() == nullptr) {
          return Status(StatusCode::kInvalidArgument,
                        "'--chat' needs a chat template: the tokenizer folder's "
                        "tokenizer_config.json has none");
        }
        ChatTemplate::Options chat;
        chat.add_generation_prompt = true;
        auto rendered = engine->chat_template()->render(
            nlohmann::json::array({{{"role", "user"}, {"content", *jobs[i].text}}}).dump(), "", chat);
        if (!rendered) return rendered.status();
        outcomes[i].prompt = engine->tokenizer()->encode(*rendered, /*add_special_tokens=*/false);
      } else {
        outcomes[i].prompt = engine->tokenizer()->encode(*jobs[i].text, /*add_special_tokens=*/true);
      }
    }
    auto id = engine->submit(outcomes[i].prompt, jobs[i].params);
    if (!id) {
      if (jobs.size() == 1) return id.status();
      outcomes[i].finish_reason = "error";
      outcomes[i].error = id.status().message();
      continue;
    }
    index_of[*id] = i;
  }
  const auto t_run = Clock::now();
  std::vector<double> ttft;
  while (engine->has_unfinished_requests()) {
    (void)engine->step();  // a failed step finishes its requests with an error, reported below
    for (RequestEvent& e : engine->poll()) {
      Outcome& o = outcomes[index_of.at(e.request_id)];
      o.output.insert(o.output.end(), e.token_ids.begin(), e.token_ids.end());
      o.text += e.text;
      for (const auto& lp : e.logprobs) o.logprobs.push_back(logprob_json(lp));
      for (const auto& lp : e.prompt_logprobs) o.prompt_logprobs.push_back(logprob_json(lp));
      if (e.finished) {
        o.finish_reason = finish_reason_name(e.finish_reason);
        o.error = e.error;
        if (e.first_token_time > 0) ttft.push_back(e.first_token_time - e.arrival_time);
      }
    }
  }
  const double run_s = std::chrono::duration<double>(Clock::now() - t_run).count();

  const bool as_json = a.has("json") || a.has("requests");
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (as_json) {
      fmt::print("{}\n", outcome_json(outcomes[i], engine->tokenizer() != nullptr).dump());
    } else if (engine->tokenizer() != nullptr) {
      fmt::print("{}\n[finish_reason: {}]\n", outcomes[i].text, outcomes[i].finish_reason);
    } else {
      fmt::print("output_ids: {}\nfinish_reason: {}\n", fmt::join(outcomes[i].output, ","), outcomes[i].finish_reason);
    }
  }
  std::fflush(stdout);
  if (a.has("stats")) {
    const EngineStats s = engine->stats();
    const double mean_ttft = ttft.empty() ? 0.0 : std::accumulate(ttft.begin(), ttft.end(), 0.0) / ttft.size();
    const json stats = {{"device", engine->model_info().device},
                        {"model", config.model},
                        {"num_requests", jobs.size()},
                        {"weight_bytes", s.weight_bytes},
                        {"kv_cache_bytes", s.kv_cache_bytes},
                        {"workspace_bytes", s.workspace_bytes},
                        {"num_kv_blocks", s.num_kv_blocks},
                        {"kv_capacity_tokens", s.kv_capacity_tokens},
                        {"num_steps", s.num_steps},
                        {"num_preemptions", s.num_preemptions},
                        {"prefix_cache_hit_tokens", s.prefix_cache_hit_tokens},
                        {"prefix_cache_queries", s.prefix_cache_queries},
                        {"prompt_tokens_computed", s.num_prompt_tokens},
                        {"output_tokens", s.num_generated_tokens},
                        {"load_s", load_s},
                        {"run_s", run_s},
                        {"output_tok_per_s", run_s > 0 ? static_cast<double>(s.num_generated_tokens) / run_s : 0.0},
                        {"mean_ttft_s", mean_ttft},
                        {"threads", omp_get_max_threads()}};
    fmt::print(stderr, "{}\n", stats.dump());
  }
  return Status::ok();
}

}  // namespace

int run_generate(int argc, char** argv) {
  Args args = make_args();
  EngineConfig config;
  std::vector<Job> jobs;
  return run_command(
      args, argc, argv, 2, "photon generate", [&] { return read_options(args, config, jobs); },
      [&] { return run(args, std::move(config), jobs); });
}

}  // namespace photon::cli
