// Scheduler policy with a fake model (the next token is a hash of the sequence so far): budgets, chunking,
// preemption by recompute, prefix hits, cancellation, and a long randomized run checking invariants every step.
#include <catch2/catch_test_macros.hpp>

#include <map>
#include <random>

#include "scheduler/scheduler.hpp"

using namespace photon;

namespace {

constexpr int32_t kVocab = 500;
constexpr int32_t kEos = 0;

int32_t fake_next_token(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  return static_cast<int32_t>(1 + h % (kVocab - 1));  // never EOS
}

std::unique_ptr<Request> make_request(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens,
                                      int32_t priority = 0) {
  auto r = std::make_unique<Request>();
  r->id = id;
  r->arrival = id;
  r->params.max_tokens = max_tokens;
  r->params.priority = priority;
  r->num_prompt_tokens = static_cast<int32_t>(prompt.size());
  r->tokens = std::move(prompt);
  return r;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int32_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(1 + rng() % (kVocab - 1));
  return p;
}

// One step with the fake model; checks the budgets. Returns the requests that finished.
std::vector<Request*> run_step(Scheduler& s, const SchedulerConfig& c) {
  const SchedulerOutput out = s.schedule();
  int32_t tokens = 0, logits = 0;
  std::vector<int32_t> sampled(out.scheduled.size(), -1);
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    const auto& x = out.scheduled[i];
    tokens += x.num_new_tokens;
    logits += x.num_logits;
    REQUIRE(x.num_new_tokens > 0);
    REQUIRE(x.request->num_computed_tokens + x.num_new_tokens <= x.request->num_tokens());
    REQUIRE(static_cast<int64_t>(x.request->block_table.size()) * c.block_size >=
            x.request->num_computed_tokens + x.num_new_tokens);
    if (x.sample) sampled[i] = fake_next_token(x.request->tokens);
  }
  REQUIRE(tokens <= c.max_num_batched_tokens);
  REQUIRE(logits <= c.max_num_logits);
  REQUIRE(out.num_tokens == tokens);
  auto finished = s.update(out, sampled);
  REQUIRE(s.check_invariants().is_ok());
  return finished;
}

// Runs to completion; returns each request's generated tokens.
std::map<uint64_t, std::vector<int32_t>> drain(Scheduler& s, const SchedulerConfig& c, int max_steps = 100000) {
  std::map<uint64_t, std::vector<int32_t>> outputs;
  for (int i = 0; i < max_steps && s.has_unfinished(); ++i) {
    for (Request* r : run_step(s, c)) {
      outputs[r->id] = std::vector<int32_t>(r->tokens.begin() + r->num_prompt_tokens, r->tokens.end());
    }
    s.remove_finished();
  }
  REQUIRE_FALSE(s.has_unfinished());
  return outputs;
}

}  // namespace

TEST_CASE("long prompts are chunked under the token budget and mixed with decodes") {
  SchedulerConfig c;
  c.max_num_batched_tokens = 32;
  c.num_blocks = 64;
  c.block_size = 4;
  Scheduler s(c);
  std::mt19937 rng(1);
  REQUIRE(s.add_request(make_request(1, random_prompt(rng, 6), 20)).is_ok());
  REQUIRE(s.add_request(make_request(2, random_prompt(rng, 100), 3)).is_ok());
  // Step 1: all of request 1's prompt (6) and the first 26 tokens of request 2's.
  auto out = s.schedule();
  REQUIRE(out.scheduled.size() == 2);
  CHECK(out.scheduled[0].num_new_tokens == 6);
  CHECK(out.scheduled[0].sample);
  CHECK(out.scheduled[1].num_new_tokens == 26);
  CHECK_FALSE(out.scheduled[1].sample);
  std::vector<int32_t> sampled = {fake_next_token(out.scheduled[0].request->tokens), -1};
  s.update(out, sampled);
  // Step 2: request 1 decodes one token, request 2 continues with 31.
  out = s.schedule();
  REQUIRE(out.scheduled.size() == 2);
  CHECK(out.scheduled[0].num_new_tokens == 1);
  CHECK(out.scheduled[1].num_new_tokens == 31);
  CHECK(out.scheduled[1].request->num_computed_tokens == 26);
  s.update(out, std::vector<int32_t>{fake_next_token(out.scheduled[0].request->tokens), -1});
  auto outputs = drain(s, c);
  CHECK(outputs[1].size() == 20);
  CHECK(outputs[2].size() == 3);
}

TEST_CASE("max_num_seqs caps the running set; priority decides admission") {
  SchedulerConfig c;
  c.max_num_seqs = 2;
  c.num_blocks = 64;
  c.block_size = 4;
  Scheduler s(c);
  std::mt19937 rng(2);
  REQUIRE(s.add_request(make_request(1, random_prompt(rng, 5), 4, /*priority=*/5)).is_ok());
  REQUIRE(s.add_request(make_request(2, random_prompt(rng, 5), 4, 0)).is_ok());
  REQUIRE(s.add_request(make_request(3, random_prompt(rng, 5), 4, 1)).is_ok());
  const auto out = s.schedule();
  REQUIRE(out.scheduled.size() == 2);
  CHECK(out.scheduled[0].request->id == 2);  // lowest priority value first
  CHECK(out.scheduled[1].request->id == 3);
  CHECK(s.stats().num_waiting == 1);
}

TEST_CASE("preemption by recompute gives the tokens of an unpreempted run") {
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(random_prompt(rng, 10 + 3 * i));
  auto run = [&](int32_t num_blocks, int64_t* preemptions) {
    SchedulerConfig c;
    c.max_num_batched_tokens = 24;
    c.num_blocks = num_blocks;
    c.block_size = 4;
    c.max_model_len = 64;
    Scheduler s(c);
    for (size_t i = 0; i < prompts.size(); ++i) {
      REQUIRE(s.add_request(make_request(i + 1, prompts[i], 30)).is_ok());
    }
    auto out = drain(s, c);
    *preemptions = s.stats().num_preemptions;
    REQUIRE(s.block_manager().num_free_blocks() == num_blocks);  // no leaks
    return out;
  };
  int64_t roomy_preemptions = 0, tight_preemptions = 0;
  const auto roomy = run(400, &roomy_preemptions);
  const auto tight = run(24, &tight_preemptions);
  CHECK(roomy_preemptions == 0);
  CHECK(tight_preemptions > 0);
  CHECK(roomy == tight);
  for (const auto& [id, out] : tight) CHECK(out.size() == 30);
}

TEST_CASE("a shared prefix is computed once") {
  SchedulerConfig c;
  c.num_blocks = 64;
  c.block_size = 4;
  Scheduler s(c);
  std::mt19937 rng(4);
  const auto prompt = random_prompt(rng, 21);
  REQUIRE(s.add_request(make_request(1, prompt, 2)).is_ok());
  drain(s, c);
  auto second = prompt;
  second.push_back(7);
  REQUIRE(s.add_request(make_request(2, second, 2)).is_ok());
  const auto out = s.schedule();
  REQUIRE(out.scheduled.size() == 1);
  CHECK(out.scheduled[0].request->num_computed_tokens == 20);  // 5 full blocks from request 1
  CHECK(out.scheduled[0].num_new_tokens == 2);
  CHECK(s.stats().prefix_cache_hits == 20);
  CHECK(s.stats().prefix_cache_queries == 21 + 22);
}

TEST_CASE("finishing or cancelling a request frees its blocks at once") {
  SchedulerConfig c;
  c.num_blocks = 16;
  c.block_size = 4;
  c.enable_prefix_caching = false;
  Scheduler s(c);
  std::mt19937 rng(5);
  REQUIRE(s.add_request(make_request(1, random_prompt(rng, 20), 8)).is_ok());
  REQUIRE(s.add_request(make_request(2, random_prompt(rng, 8), 8)).is_ok());
  run_step(s, c);
  CHECK(s.block_manager().num_free_blocks() < 16);
  CHECK(s.finish_request(1, FinishReason::kCancelled));
  CHECK_FALSE(s.finish_request(1, FinishReason::kCancelled));
  CHECK(s.find(1)->finish_reason == FinishReason::kCancelled);
  CHECK(s.check_invariants().is_ok());
  s.remove_finished();
  CHECK(s.find(1) == nullptr);
  CHECK(s.finish_request(2, FinishReason::kCancelled));
  CHECK(s.block_manager().num_free_blocks() == 16);
  CHECK_FALSE(s.has_unfinished());
}

TEST_CASE("requests that cannot fit are rejected at submit") {
  SchedulerConfig c;
  c.num_blocks = 4;
  c.block_size = 4;
  c.max_model_len = 100;
  Scheduler s(c);
  auto st = s.add_request(make_request(1, std::vector<int32_t>(90, 1), 20));
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("max_model_len") != std::string::npos);
  st = s.add_request(make_request(2, std::vector<int32_t>(10, 1), 10));
  CHECK(st.code() == StatusCode::kResourceExhausted);
  CHECK(st.message().find("whole cache holds 16") != std::string::npos);
  CHECK(s.add_request(make_request(3, {}, 1)).code() == StatusCode::kInvalidArgument);
  CHECK_FALSE(s.has_unfinished());
}

TEST_CASE("EOS and stop ids end requests; ignore_eos keeps going") {
  SchedulerConfig c;
  c.num_blocks = 16;
  c.block_size = 4;
  Scheduler s(c);
  s.set_eos_ids({kEos});
  auto a = make_request(1, {5, 6}, 10);
  auto b = make_request(2, {5, 6}, 10);
  b->params.ignore_eos = true;
  auto d = make_request(3, {5, 6}, 10);
  d->params.stop_token_ids = {42};
  REQUIRE(s.add_request(std::move(a)).is_ok());
  REQUIRE(s.add_request(std::move(b)).is_ok());
  REQUIRE(s.add_request(std::move(d)).is_ok());
  auto out = s.schedule();
  auto finished = s.update(out, std::vector<int32_t>{kEos, kEos, 42});
  REQUIRE(finished.size() == 2);
  CHECK(finished[0]->finish_reason == FinishReason::kStop);
  CHECK(finished[1]->id == 3);
  CHECK(s.find(2)->state == RequestState::kRunning);
}

TEST_CASE("randomized submit / cancel / step keeps every invariant") {
  std::mt19937 rng(6);
  SchedulerConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 48;
  c.max_num_logits = 20;
  c.num_blocks = 40;
  c.block_size = 4;
  c.max_model_len = 120;
  Scheduler s(c);
  uint64_t next_id = 1;
  int64_t finished = 0;
  const auto shared_prefix = random_prompt(rng, 9);
  for (int step = 0; step < 3000; ++step) {
    if (rng() % 3 == 0) {
      auto r = make_request(next_id, random_prompt(rng, 1 + static_cast<int32_t>(rng() % 60)),
                            1 + static_cast<int32_t>(rng() % 40), static_cast<int32_t>(rng() % 3));
      if (rng() % 4 == 0) r->params.prompt_logprobs = 1;
      // Share a prefix now and then.
      if (rng() % 3 == 0 && r->tokens.size() > shared_prefix.size()) {
        std::copy(shared_prefix.begin(), shared_prefix.end(), r->tokens.begin());
      }
      REQUIRE(s.add_request(std::move(r)).is_ok());
      ++next_id;
    }
    if (rng() % 10 == 0 && next_id > 1) s.finish_request(1 + rng() % (next_id - 1), FinishReason::kCancelled);
    finished += static_cast<int64_t>(run_step(s, c).size());
    s.remove_finished();
  }
  drain(s, c);
  CHECK(finished > 100);
  CHECK(s.stats().num_preemptions > 0);
  CHECK(s.stats().prefix_cache_hits > 0);
  CHECK(s.block_manager().num_referenced_blocks() == 0);
  CHECK(s.block_manager().num_free_blocks() == c.num_blocks);
}

// Runs `s` to the end as async scheduling does: each step is planned after the step before it advanced over
// placeholders and before it commits. `sample(out)` gives a step's ids once every token it planned is known;
// `committed(next, finished)` sees the step planned ahead and the requests the commit before it finished.
template <typename Sample, typename Committed>
void run_planning_ahead(Scheduler& s, Sample sample, Committed committed) {
  SchedulerOutput current = s.schedule();
  std::vector<int32_t> sampled = sample(current);
  for (int step = 0; s.has_unfinished(); ++step) {
    REQUIRE(step < 10000);
    std::vector<int32_t> placeholders(current.scheduled.size(), -1);
    for (size_t i = 0; i < placeholders.size(); ++i) placeholders[i] = -static_cast<int32_t>(i) - 1;
    s.advance(current, placeholders);
    SchedulerOutput next = s.schedule();
    REQUIRE(s.check_invariants().is_ok());
    committed(next, s.commit(current, sampled));
    s.remove_finished();
    REQUIRE(s.check_invariants().is_ok());
    current = std::move(next);
    sampled = sample(current);
  }
}

TEST_CASE("a step planned before the last one's tokens are known leaves out the requests they finish by length") {
  // The last token of a request (its max_tokens-th, or the one reaching max_model_len) is a placeholder when the next
  // step is planned; commit() then finishes the request, so a row planned for it would be computed only to be
  // dropped — and, where every prompt fills a step (perplexity's chunks, which generate one token each), it would push
  // each next prompt across two steps.
  SchedulerConfig c;
  c.max_num_batched_tokens = 16;
  c.num_blocks = 64;
  c.block_size = 4;
  c.max_model_len = 40;
  std::mt19937 rng(21);
  Scheduler s(c);
  for (uint64_t id = 1; id <= 3; ++id) REQUIRE(s.add_request(make_request(id, random_prompt(rng, 16), 1)).is_ok());
  REQUIRE(s.add_request(make_request(4, random_prompt(rng, 5), 4)).is_ok());
  REQUIRE(s.add_request(make_request(5, random_prompt(rng, 30), 10)).is_ok());  // and at max_model_len
  int64_t computed = 0;
  std::vector<int32_t> first_steps;  // num_new_tokens of the one-token requests' steps
  const auto sample = [&](const SchedulerOutput& out) {
    std::vector<int32_t> ids(out.scheduled.size(), -1);
    for (size_t i = 0; i < out.scheduled.size(); ++i) {
      const ScheduledRequest& x = out.scheduled[i];
      computed += x.num_new_tokens;
      if (x.request->id <= 3) first_steps.push_back(x.num_new_tokens);
      if (x.sample) ids[i] = fake_next_token(x.request->tokens);
    }
    return ids;
  };
  run_planning_ahead(s, sample, [](const SchedulerOutput& next, const std::vector<Request*>&) {
    for (const ScheduledRequest& x : next.scheduled) {
      INFO("request " << x.request->id << " planned after its last token");
      CHECK_FALSE(x.request->is_finished());
    }
  });
  // Every token computed once, as a step-by-step run computes it: a prompt, then each output but the last fed back.
  CHECK(computed == (3 * 16) + (5 + 4 - 1) + (30 + 10 - 1));
  CHECK(first_steps == std::vector<int32_t>{16, 16, 16});  // each one-token prompt in one step
  CHECK(s.block_manager().num_free_blocks() == c.num_blocks);
}

TEST_CASE("planning a step before the last one's tokens are known gives the tokens of update()") {
  // Async scheduling: advance() appends placeholders, the next step is planned over them, then commit() writes the
  // sampled ids. Under preemption and prefix hits the outputs must equal the step-by-step run's.
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  const auto shared = random_prompt(rng, 9);
  for (int i = 0; i < 8; ++i) {
    auto p = i % 2 == 0 ? shared : random_prompt(rng, 5 + i);
    p.push_back(static_cast<int32_t>(1 + i));
    prompts.push_back(p);
  }
  SchedulerConfig c;
  c.max_num_batched_tokens = 20;
  c.num_blocks = 30;
  c.block_size = 4;
  c.max_model_len = 64;
  auto submit_all = [&](Scheduler& s) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      REQUIRE(s.add_request(make_request(i + 1, prompts[i], 6 + 3 * static_cast<int32_t>(i))).is_ok());
    }
  };
  Scheduler sync_scheduler(c);
  submit_all(sync_scheduler);
  const auto expected = drain(sync_scheduler, c);

  Scheduler s(c);
  submit_all(s);
  std::map<uint64_t, std::vector<int32_t>> outputs;
  const auto sample = [&](const SchedulerOutput& out) {  // the model, run once every planned token is known
    std::vector<int32_t> ids(out.scheduled.size(), -1);
    for (size_t i = 0; i < out.scheduled.size(); ++i) {
      const ScheduledRequest& x = out.scheduled[i];
      if (x.request == nullptr || !x.sample) continue;
      for (int32_t t : x.request->tokens) REQUIRE(t >= 0);
      ids[i] = fake_next_token(x.request->tokens);
    }
    return ids;
  };
  run_planning_ahead(s, sample, [&](SchedulerOutput& next, const std::vector<Request*>& finished) {
    for (Request* r : finished) {
      outputs[r->id] = std::vector<int32_t>(r->tokens.begin() + r->num_prompt_tokens, r->tokens.end());
    }
    for (ScheduledRequest& x : next.scheduled) {
      if (x.request->is_finished()) x.request = nullptr;  // its planned token is dropped
    }
  });
  CHECK(outputs == expected);
  CHECK(s.stats().num_preemptions > 0);
  CHECK(s.stats().prefix_cache_hits > 0);
  CHECK(s.block_manager().num_free_blocks() == c.num_blocks);
}
