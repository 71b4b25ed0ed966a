// Host-side cost of one engine step without the model: schedule + prepare (the ragged batch) + update, with N
// running requests in the decode phase. The budget: <= 50 us at 256 requests, so the host never holds back a GPU step.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>

#include "engine/model_runner.hpp"
#include "scheduler/scheduler.hpp"

namespace photon {
namespace {

void BM_HostStep(benchmark::State& state) {
  const auto num_requests = static_cast<int32_t>(state.range(0));
  constexpr int32_t kPrompt = 512;
  constexpr int32_t kBlockSize = 16;
  constexpr int64_t kMaxSteps = 4096;
  SchedulerConfig c;
  c.max_num_seqs = num_requests;
  c.max_num_batched_tokens = 8192;
  c.max_num_logits = num_requests;
  c.block_size = kBlockSize;
  c.max_model_len = kPrompt + static_cast<int32_t>(kMaxSteps) + 64;
  c.num_blocks = num_requests * (c.max_model_len / kBlockSize + 1);
  Scheduler scheduler(c);
  std::mt19937 rng(1);
  for (int32_t i = 0; i < num_requests; ++i) {
    auto r = std::make_unique<Request>();
    r->id = static_cast<uint64_t>(i + 1);
    r->arrival = r->id;
    r->params.max_tokens = static_cast<int32_t>(kMaxSteps) + 32;
    r->num_prompt_tokens = kPrompt;
    r->tokens.resize(kPrompt);
    for (auto& t : r->tokens) t = static_cast<int32_t>(rng() % 32000);
    r->tokens.reserve(static_cast<size_t>(c.max_model_len));
    if (!scheduler.add_request(std::move(r))) state.SkipWithError("add_request failed");
  }
  ForwardBatch batch;
  std::vector<int32_t> sampled;
  // Prefill everything first, so the timed steps are steady-state decode steps.
  while (true) {
    const SchedulerOutput out = scheduler.schedule();
    sampled.assign(out.scheduled.size(), 7);
    scheduler.update(out, sampled);
    if (out.num_tokens == num_requests) break;
  }
  int64_t steps = 0;
  for (auto _ : state) {
    const SchedulerOutput out = scheduler.schedule();
    build_forward_batch(out, kBlockSize, batch);
    sampled.assign(out.scheduled.size(), static_cast<int32_t>(steps % 32000));
    scheduler.update(out, sampled);
    benchmark::DoNotOptimize(batch.token_ids.data());
    if (++steps >= kMaxSteps) state.SkipWithError("ran out of pre-sized context; lower the iteration count");
  }
  state.counters["requests"] = num_requests;
}
BENCHMARK(BM_HostStep)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond)->Iterations(2000);

}  // namespace
}  // namespace photon

BENCHMARK_MAIN();
