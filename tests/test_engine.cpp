// The Engine end to end on the parity checkpoints: continuous batching under a tight KV budget and a small token
// budget reproduces transformers' greedy tokens exactly, with preemptions and prefix-cache hits actually happening.
#include <catch2/catch_test_macros.hpp>

#include <atomic>
#include <cmath>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>
#include <photon/engine.hpp>

#include "core/mapped_file.hpp"
#include "cpu/cpu_backend.hpp"

using namespace photon;
using nlohmann::json;

namespace {

const std::string kModel = std::string(PHOTON_TEST_DATA_DIR) + "/parity/llama3-gqa-tied-ropescaled";

json reference() { return json::parse(read_text_file(kModel + "/reference.json").value()); }

std::unique_ptr<Engine> make_engine(EngineConfig c) {
  auto e = Engine::create(c);
  INFO(e.status().to_string());
  REQUIRE(e.is_ok());
  return std::move(*e);
}

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> prompt_logprobs;
  std::vector<TokenLogprob> logprobs;
  FinishReason reason = FinishReason::kNone;
  std::string error;
};

std::map<uint64_t, Collected> run_all(Engine& engine) {
  std::map<uint64_t, Collected> out;
  for (int guard = 0; engine.has_unfinished_requests(); ++guard) {
    REQUIRE(guard < 100000);
    REQUIRE(engine.step().is_ok());
    for (auto& e : engine.poll()) {
      Collected& c = out[e.request_id];
      c.tokens.insert(c.tokens.end(), e.token_ids.begin(), e.token_ids.end());
      c.prompt_logprobs.insert(c.prompt_logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
      c.logprobs.insert(c.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      if (e.finished) {
        c.reason = e.finish_reason;
        c.error = e.error;
      }
    }
  }
  return out;
}

SamplingParams greedy(int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

}  // namespace

TEST_CASE("a mixed batch under tight budgets gives transformers' greedy tokens for every request") {
  const json ref = reference();
  EngineConfig c;
  c.model = kModel;
  c.block_size = 4;
  c.num_kv_blocks = 24;  // 96 tokens: the longest request alone needs 64
  c.max_model_len = 64;
  c.max_num_batched_tokens = 16;
  c.max_num_seqs = 8;
  auto engine = make_engine(c);
  std::map<uint64_t, size_t> case_of;
  // Each case twice (the second copy hits the prefix cache), plus prompt logprobs on one.
  for (int copy = 0; copy < 2; ++copy) {
    for (size_t i = 0; i < ref["cases"].size(); ++i) {
      SamplingParams p = greedy(24);
      if (copy == 1 && i == 2) p.prompt_logprobs = 5;
      auto id = engine->submit(ref["cases"][i]["prompt_ids"].get<std::vector<int32_t>>(), p);
      REQUIRE(id.is_ok());
      case_of[*id] = i;
    }
  }
  const auto results = run_all(*engine);
  REQUIRE(results.size() == case_of.size());
  for (const auto& [id, r] : results) {
    const json& expected = ref["cases"][case_of.at(id)];
    INFO("request " << id);
    CHECK(r.reason == FinishReason::kLength);
    CHECK(r.tokens == expected["output_ids"].get<std::vector<int32_t>>());
    if (!r.prompt_logprobs.empty()) {
      REQUIRE(r.prompt_logprobs.size() == expected["prompt_ids"].size() - 1);
      for (size_t k = 0; k < r.prompt_logprobs.size(); ++k) {
        CHECK(std::abs(r.prompt_logprobs[k].logprob - expected["prompt_logprobs"][k + 1]["logprob"].get<double>()) <
              2e-3);
      }
    }
  }
  const EngineStats s = engine->stats();
  CHECK(s.num_preemptions > 0);
  CHECK(s.prefix_cache_hit_tokens > 0);
  CHECK(s.num_free_kv_blocks == s.num_kv_blocks);
  CHECK(s.num_running == 0);
}

TEST_CASE("a seeded request samples the same tokens whatever else is batched") {
  EngineConfig c;
  c.model = kModel;
  c.num_kv_blocks = 64;
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.seed = 1234;
  p.max_tokens = 20;
  p.ignore_eos = true;
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9};
  auto alone = make_engine(c);
  const uint64_t a = alone->submit(prompt, p).value();
  const auto ra = run_all(*alone).at(a).tokens;

  auto busy = make_engine(c);
  SamplingParams other = p;
  other.seed = 99;
  busy->submit({10, 11, 12}, other).value();
  busy->submit({5, 6, 7, 8}, other).value();
  REQUIRE(busy->step().is_ok());  // the seeded request joins a batch already in flight
  const uint64_t b = busy->submit(prompt, p).value();
  busy->submit({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, other).value();
  const auto rb = run_all(*busy).at(b).tokens;
  CHECK(ra == rb);
  // Another seed draws a different continuation.
  auto third = make_engine(c);
  p.seed = 4321;
  const uint64_t d = third->submit(prompt, p).value();
  CHECK(run_all(*third).at(d).tokens != ra);
}

TEST_CASE("cancel ends a request at the next step and frees its blocks") {
  EngineConfig c;
  c.model = kModel;
  c.num_kv_blocks = 64;
  auto engine = make_engine(c);
  const uint64_t id = engine->submit({1, 2, 3, 4, 5, 6, 7, 8}, greedy(100)).value();
  const uint64_t queued = engine->submit({9, 9, 9}, greedy(5)).value();
  REQUIRE(engine->cancel(queued).is_ok());  // never scheduled: cancelled at once
  for (int i = 0; i < 3; ++i) REQUIRE(engine->step().is_ok());
  CHECK(engine->stats().num_free_kv_blocks < engine->stats().num_kv_blocks);
  REQUIRE(engine->cancel(id).is_ok());
  const auto results = run_all(*engine);
  CHECK(results.at(id).reason == FinishReason::kCancelled);
  CHECK(results.at(queued).reason == FinishReason::kCancelled);
  CHECK(engine->stats().num_free_kv_blocks == engine->stats().num_kv_blocks);
  CHECK(engine->cancel(id).code() == StatusCode::kNotFound);
  CHECK(engine->cancel(12345).code() == StatusCode::kNotFound);
}

TEST_CASE("bad requests and configurations are errors that say what to change") {
  EngineConfig c;
  c.model = kModel;
  c.num_kv_blocks = 8;
  c.block_size = 4;
  auto tiny = Engine::create(c);
  REQUIRE_FALSE(tiny.is_ok());
  CHECK(tiny.status().message().find("lower max_model_len to 32") != std::string::npos);
  c.max_model_len = 32;
  auto engine = make_engine(c);
  CHECK(engine->model_info().max_model_len == 32);
  CHECK(engine->submit({}, greedy(1)).status().code() == StatusCode::kInvalidArgument);
  CHECK(engine->submit({1000}, greedy(1)).status().message().find("outside the vocabulary") != std::string::npos);
  CHECK(engine->submit({1, 2}, greedy(40)).status().message().find("max_model_len") != std::string::npos);
  SamplingParams p = greedy(2);
  p.top_p = 0.0f;
  CHECK(engine->submit({1}, p).status().message().find("top_p") != std::string::npos);
  p = greedy(2);
  p.temperature = -1.0f;
  CHECK(engine->submit({1}, p).status().message().find("temperature") != std::string::npos);
  p = greedy(2);
  p.logit_bias = {{5, 1.0f}, {1000, 1.0f}};
  CHECK(engine->submit({1}, p).status().message().find("logit_bias names token id 1000, outside the vocabulary") !=
        std::string::npos);
  p.logit_bias = {{5, 100.5f}};
  CHECK(engine->submit({1}, p).status().message().find("from -100 to 100, not 100.5") != std::string::npos);
  p.logit_bias = {{5, std::nanf("")}};
  CHECK(engine->submit({1}, p).status().code() == StatusCode::kInvalidArgument);
  p.logit_bias = {{7, 1.0f}, {5, 2.0f}, {7, -1.0f}};
  CHECK(engine->submit({1}, p).status().message().find("names token id 7 twice") != std::string::npos);
  EngineConfig bad = c;
  bad.device = "tpu";
  CHECK(Engine::create(bad).status().code() == StatusCode::kInvalidArgument);
  bad = c;
  bad.model = "dummy:nope";
  CHECK(Engine::create(bad).status().message().find("unknown dummy model") != std::string::npos);
  CHECK_FALSE(engine->has_unfinished_requests());
}

TEST_CASE("submit, cancel and poll from many threads while the background loop steps") {
  EngineConfig c;
  c.model = kModel;
  c.num_kv_blocks = 48;
  c.block_size = 4;
  c.max_model_len = 64;
  c.max_num_batched_tokens = 32;
  auto engine = make_engine(c);
  REQUIRE(engine->start().is_ok());
  REQUIRE(engine->start().is_ok());  // idempotent
  std::atomic<int> finished{0}, cancelled{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        auto id = engine->submit({1 + t, 2 + i, 3, 4, 5}, greedy(8));
        REQUIRE(id.is_ok());
        if (i % 3 == 0) (void)engine->cancel(*id);
      }
    });
  }
  std::thread poller([&] {
    while (finished.load() < 40) {
      engine->wait_for_events(50);
      for (auto& e : engine->poll()) {
        if (e.finished) {
          ++finished;
          if (e.finish_reason == FinishReason::kCancelled) ++cancelled;
        }
      }
    }
  });
  for (auto& th : threads) th.join();
  poller.join();
  engine->stop();
  CHECK(finished.load() == 40);
  CHECK(cancelled.load() <= 16);
  CHECK_FALSE(engine->has_unfinished_requests());
  CHECK(engine->stats().num_free_kv_blocks == engine->stats().num_kv_blocks);
}

TEST_CASE("async scheduling gives the same events as waiting for every step") {
  // One step is planned while the previous one's ids are still on the device: requests that stop (EOS, stop ids,
  // max_tokens, cancel) have one token too many computed, which must never reach an event.
  const json ref = reference();
  struct Stream {
    std::vector<int32_t> tokens;
    std::vector<TokenLogprob> logprobs;
    FinishReason reason = FinishReason::kNone;
    int finished_events = 0;
    bool event_after_finish = false;
  };
  auto run = [&](bool async) {
    EngineConfig c;
    c.model = kModel;
    c.block_size = 4;
    c.num_kv_blocks = 48;  // tight: preemptions happen
    c.max_model_len = 80;
    c.max_num_batched_tokens = 16;
    c.max_num_seqs = 6;
    c.async_scheduling = async;
    auto engine = make_engine(c);
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < ref["cases"].size(); ++i) {
      const auto prompt = ref["cases"][i]["prompt_ids"].get<std::vector<int32_t>>();
      const auto expected = ref["cases"][i]["output_ids"].get<std::vector<int32_t>>();
      SamplingParams p = greedy(static_cast<int32_t>(3 + 5 * i));  // staggered ends
      ids.push_back(engine->submit(prompt, p).value());
      SamplingParams stop = greedy(30);
      stop.stop_token_ids = {expected[4 + i]};  // stops on a token the model really produces
      ids.push_back(engine->submit(prompt, stop).value());
      SamplingParams seeded;
      seeded.temperature = 0.9f;
      seeded.top_k = 20;
      seeded.seed = 7 + i;
      seeded.max_tokens = 17;
      ids.push_back(engine->submit(prompt, seeded).value());
    }
    const uint64_t doomed = engine->submit({2, 7, 1, 8}, greedy(40)).value();
    ids.push_back(doomed);
    std::map<uint64_t, Stream> streams;
    for (int step = 0; engine->has_unfinished_requests(); ++step) {
      REQUIRE(step < 10000);
      if (step == 6) REQUIRE(engine->cancel(doomed).is_ok());
      if (step == 12) {
        // Logprobs and penalties: the backend adjusts the row, selects, then puts the model's logits back.
        SamplingParams penalised = greedy(9);
        penalised.logprobs = 2;
        penalised.repetition_penalty = 1.2f;
        ids.push_back(engine->submit({3, 1, 4, 1, 5}, penalised).value());
        // Logprobs alone: sampled by the backend, which computes the chosen tokens' logprobs too.
        SamplingParams device = greedy(11);
        device.logprobs = 3;
        ids.push_back(engine->submit({2, 7, 1, 8, 2, 8}, device).value());
        // A logit bias: its logprobs stay the model's own.
        SamplingParams biased = greedy(7);
        biased.logprobs = 3;
        biased.logit_bias = {{42, 100.0f}, {17, -100.0f}};
        ids.push_back(engine->submit({1, 7, 1, 8, 2, 8}, biased).value());
      }
      REQUIRE(engine->step().is_ok());
      for (auto& e : engine->poll()) {
        Stream& s = streams[e.request_id];
        if (s.finished_events > 0) s.event_after_finish = true;
        s.tokens.insert(s.tokens.end(), e.token_ids.begin(), e.token_ids.end());
        s.logprobs.insert(s.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
        if (e.finished) {
          ++s.finished_events;
          s.reason = e.finish_reason;
        }
      }
    }
    const EngineStats st = engine->stats();
    CHECK(st.num_free_kv_blocks == st.num_kv_blocks);
    CHECK(st.num_running == 0);
    REQUIRE(streams.size() == ids.size());
    for (const auto& [id, s] : streams) {
      INFO("request " << id << (async ? " (async)" : ""));
      CHECK(s.finished_events == 1);
      CHECK_FALSE(s.event_after_finish);
    }
    return std::make_pair(streams, doomed);
  };
  const auto [sync_streams, sync_doomed] = run(false);
  const auto [async_streams, async_doomed] = run(true);
  REQUIRE(sync_streams.size() == async_streams.size());
  for (const auto& [id, s] : sync_streams) {
    INFO("request " << id);
    const auto& a = async_streams.at(id);
    CHECK(a.reason == s.reason);
    if (id == sync_doomed) {
      CHECK(a.reason == FinishReason::kCancelled);  // where a cancel lands depends on step timing, not its outcome
      continue;
    }
    CHECK(a.tokens == s.tokens);
    REQUIRE(a.logprobs.size() == s.logprobs.size());
    for (size_t k = 0; k < s.logprobs.size(); ++k) {
      CHECK(a.logprobs[k].token == s.logprobs[k].token);
      CHECK(a.logprobs[k].logprob == s.logprobs[k].logprob);
      CHECK(a.logprobs[k].top == s.logprobs[k].top);
    }
  }
  // The three logprob requests reported one logprob per token, of that token, with their top tokens.
  int with_logprobs = 0;
  const uint64_t biased_id = async_streams.rbegin()->first;  // submitted last
  for (const auto& [id, s] : async_streams) {
    if (s.logprobs.empty()) continue;
    ++with_logprobs;
    REQUIRE(s.logprobs.size() == s.tokens.size());
    for (size_t k = 0; k < s.tokens.size(); ++k) {
      CHECK(s.logprobs[k].token == s.tokens[k]);
      CHECK(s.logprobs[k].logprob <= 0.0f);
      REQUIRE((s.logprobs[k].top.size() == 2 || s.logprobs[k].top.size() == 3));
      // The biased request chose token 42 every time; its logprobs are the model's, far from the biased ~0.
      const bool biased = id == biased_id;
      if (biased) CHECK(s.tokens[k] == 42);
      if (biased) CHECK(s.logprobs[k].logprob < -0.01f);
      // Greedy without penalties or bias: the chosen token is the most likely one.
      if (s.logprobs[k].top.size() == 3 && !biased) CHECK(s.logprobs[k].top[0].first == s.tokens[k]);
    }
  }
  CHECK(with_logprobs == 3);
  // The stop ids really stopped requests early, so the extra planned token was exercised.
  int stopped = 0;
  for (const auto& [id, s] : async_streams) stopped += s.reason == FinishReason::kStop;
  CHECK(stopped >= 2);
}

TEST_CASE("steps reporting prompt logprobs are launched ahead and report what waiting for each step does") {
  // Prompts over several chunks (16 tokens a step) whose requests ask for different numbers of top tokens in the
  // same steps: the backend computes each step's prompt logprobs (the most top tokens any request asked for) before
  // the next pass, launched ahead, writes the logits.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 45; ++i) prompt.push_back(1 + (i * 7) % 50);
  const int tops[] = {0, 2, 4};
  auto run = [&](bool async) {
    EngineConfig c;
    c.model = kModel;
    c.max_num_batched_tokens = 16;
    c.async_scheduling = async;
    auto engine = make_engine(c);
    std::map<uint64_t, Collected> out;
    std::vector<uint64_t> ids;
    for (const int top : tops) {
      SamplingParams p = greedy(3);
      p.prompt_logprobs = top;
      ids.push_back(engine->submit(std::vector<int32_t>(prompt.begin(), prompt.end() - top), p).value());
    }
    for (int step = 0; engine->has_unfinished_requests(); ++step) {
      REQUIRE(step < 1000);
      REQUIRE(engine->step().is_ok());
      for (auto& e : engine->poll()) {
        if (e.prompt_logprobs.empty()) continue;
        Collected& c = out[e.request_id];
        // Each event continues where the last one ended: every position from 1 once, in order.
        CHECK(e.prompt_logprobs_begin == 1 + static_cast<int32_t>(c.prompt_logprobs.size()));
        c.prompt_logprobs.insert(c.prompt_logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
      }
    }
    std::vector<std::vector<TokenLogprob>> result;
    for (const uint64_t id : ids) result.push_back(out[id].prompt_logprobs);
    return result;
  };
  const auto sync = run(false);
  const auto async = run(true);
  for (size_t r = 0; r < std::size(tops); ++r) {
    INFO("request " << r << ", " << tops[r] << " top tokens");
    REQUIRE(async[r].size() == prompt.size() - static_cast<size_t>(tops[r]) - 1);
    REQUIRE(sync[r].size() == async[r].size());
    for (size_t k = 0; k < async[r].size(); ++k) {
      CHECK(async[r][k].token == prompt[k + 1]);
      CHECK(async[r][k].logprob <= 0.0f);
      CHECK(async[r][k].top.size() == static_cast<size_t>(tops[r]));
      CHECK(async[r][k].logprob == sync[r][k].logprob);
      CHECK(async[r][k].top == sync[r][k].top);
    }
  }
}

TEST_CASE("penalties draw the same with logprobs as without, and the logprobs are the model's") {
  // With logprobs the backend keeps the logits the penalties replace and puts them back after the selection, for the
  // logprobs: the draws must not change. Same seed, same draws.
  EngineConfig c;
  c.model = kModel;
  c.num_kv_blocks = 64;
  auto engine = make_engine(c);
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 5;
  p.max_tokens = 24;
  p.ignore_eos = true;
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.4f;
  p.frequency_penalty = 0.2f;
  SamplingParams with_logprobs = p;
  with_logprobs.logprobs = 1;
  const std::vector<int32_t> prompt = {3, 3, 7, 1, 9, 3};
  const uint64_t without = engine->submit(prompt, p).value();
  const uint64_t with = engine->submit(prompt, with_logprobs).value();
  SamplingParams plain = with_logprobs;  // and the penalties do change the draws
  plain.repetition_penalty = 1.0f;
  plain.presence_penalty = plain.frequency_penalty = 0.0f;
  const uint64_t unpenalised = engine->submit(prompt, plain).value();
  const auto results = run_all(*engine);
  CHECK(results.at(without).tokens.size() == 24);
  CHECK(results.at(without).tokens == results.at(with).tokens);
  CHECK(results.at(without).tokens != results.at(unpenalised).tokens);
  // The first tokens of both are drawn from the same model row (the penalties move its logits, and with them the
  // normaliser): the top logprob reported is that row's, penalties or not.
  REQUIRE(results.at(with).logprobs.size() == 24);
  const TokenLogprob& penalised_first = results.at(with).logprobs[0];
  const TokenLogprob& plain_first = results.at(unpenalised).logprobs.at(0);
  REQUIRE(penalised_first.top.size() == 1);
  CHECK(penalised_first.top == plain_first.top);
}

TEST_CASE("the CPU's default KV cache is sized for the work, not for half of the machine") {
  EngineConfig c;
  c.model = "dummy:tiny-llama3";
  c.max_num_seqs = 256;  // 256 full-length sequences would want 16 GiB
  auto engine = make_engine(c);
  const EngineStats s = engine->stats();
  CHECK(s.kv_cache_bytes <= (uint64_t{4} << 30));
  CHECK(s.kv_capacity_tokens >= engine->model_info().max_model_len);  // one full-length sequence always fits
  // An explicit budget still decides.
  c.kv_cache_memory_bytes = uint64_t{64} << 20;
  c.max_model_len = 4096;
  CHECK(make_engine(c)->stats().kv_cache_bytes <= (uint64_t{64} << 20));
}

TEST_CASE("a model whose weights cannot fit the device is refused before loading, with the ways out") {
  size_t available = 0, total = 0;
  REQUIRE(make_cpu_backend(default_cpu_allocator())->memory_info(&available, &total).is_ok());
  // Llama-3.1-70B: 141 GB of bf16 weights, 74 GB with int8 projections.
  if (total > size_t{140} * 1000 * 1000 * 1000) SKIP("this host holds a 70B model's weights");
  EngineConfig c;
  c.model = "dummy:llama-3.1-70b";
  c.device = "cpu";
  auto engine = Engine::create(c);
  REQUIRE_FALSE(engine.is_ok());
  CHECK(engine.status().code() == StatusCode::kOutOfMemory);
  const std::string m = engine.status().message();
  INFO(m);
  CHECK(m.find("141.1 GB") != std::string::npos);
  CHECK(m.find("70.55 B parameters in bf16") != std::string::npos);
  CHECK(m.find("--quantization int8") != std::string::npos);
  if (total < size_t{70} * 1000 * 1000 * 1000) {
    c.quantization = "int8";
    engine = Engine::create(c);
    REQUIRE_FALSE(engine.is_ok());
    CHECK(engine.status().message().find("int8 projections") != std::string::npos);
  }
}

TEST_CASE("cuda_device_properties describes each visible GPU and nothing else") {
  const int gpus = cuda_device_count();
  for (const int missing : {-1, gpus, gpus + 7}) {
    const CudaDeviceProperties p = cuda_device_properties(missing);
    CHECK(p.total_memory_bytes == 0);
    CHECK(p.compute_capability == 0);
  }
  for (int d = 0; d < gpus; ++d) {
    const CudaDeviceProperties p = cuda_device_properties(d);
    CHECK(p.total_memory_bytes >= uint64_t{1} << 30);
    CHECK(p.compute_capability >= 70);
  }
}
