// The step loop: Engine::step and the machinery beside it.
//
// A step goes schedule -> launch (build the batch, enqueue the forward pass) -> sample (enqueue the device sampling)
// -> complete (wait for the sampled ids, read what the host needs, update the scheduler, emit events). Every
// step() call completes exactly one launched step. With async scheduling the step after it is planned and launched
// first, over placeholders for the ids still on their way, so the device runs it while the host completes this
// one; synchronous scheduling is the same loop with nothing launched ahead.
#include <algorithm>

#include "core/logging.hpp"
#include "cpu/kernels.hpp"
#include "engine/engine_impl.hpp"

namespace photon {
namespace {

// Forgets the requests of a launched step that finished since it was planned (cancelled at a step boundary, or
// stopped at the step before): their rows are computed but never read, their tokens discarded.
void drop_finished(SchedulerOutput& out) {
  for (ScheduledRequest& s : out.scheduled) {
    if (s.request != nullptr && s.request->is_finished()) s.request = nullptr;
  }
}

}  // namespace

Status Engine::Impl::step() {
  admit_requests();  // the step boundary: submissions in, cancellations applied
  if (!inflight) {
    SchedulerOutput out = scheduler->schedule();
    if (out.empty()) return end_step();
    inflight = launch(std::move(out));
    sample(*inflight);
  }
  LaunchedStep current = std::move(*inflight);
  inflight.reset();
  advance(current);  // its tokens are on their way: placeholders stand in for them
  if (may_launch_ahead(current)) {
    SchedulerOutput next = scheduler->schedule();
    if (!next.empty()) inflight = launch(std::move(next));
  }
  const Status status = complete(current);  // wait for its ids, update the scheduler, emit events
  if (inflight) sample(*inflight);          // the step ahead samples once this one's tokens are committed
  return end_step(status);
}

void Engine::Impl::admit_requests() {
  std::vector<std::unique_ptr<Request>> incoming;
  std::vector<uint64_t> cancelled;
  {
    std::lock_guard lock(mu);
    incoming.swap(inbox);
    cancelled.swap(cancels);
  }
  for (auto& r : incoming) {
    Request& ref = *r;
    const std::span<const int32_t> prompt(ref.tokens.data(), static_cast<size_t>(ref.num_prompt_tokens));
    if (Status s = scheduler->add_request(std::move(r)); !s) {
      ref.finish_reason = FinishReason::kError;
      ref.state = RequestState::kFinished;
      RequestEvent e;
      e.error = s.message();
      emit(ref, std::move(e));
      continue;
    }
    if (tokenizer) text_streams.try_emplace(ref.id, *tokenizer, prompt, ref.params.stop);
  }
  for (uint64_t id : cancelled) {
    if (scheduler->finish_request(id, FinishReason::kCancelled)) emit(*scheduler->find(id), {});
  }
}

LaunchedStep Engine::Impl::launch(SchedulerOutput out) {
  LaunchedStep step;
  step.out = std::move(out);
  runner->prepare(step.out);
  auto logits = runner->execute();
  if (logits) {
    step.logits = std::move(*logits);
  } else {
    step.status = logits.status();
  }
  return step;
}

void Engine::Impl::sample(LaunchedStep& step) {
  drop_finished(step.out);
  if (!step.status.is_ok()) return;
  // First, from the model's logits (sampling adjusts its rows in place; these are other rows, read before it anyway).
  step.status = enqueue_prompt_logprobs(step);
  if (!step.status.is_ok()) return;
  device_samples.clear();
  logit_adjustments.clear();
  step.device_owner.clear();
  step.logprob_owner.clear();
  for (size_t i = 0; i < step.out.scheduled.size(); ++i) {
    const ScheduledRequest& s = step.out.scheduled[i];
    if (s.request == nullptr || !s.sample) continue;
    const Request& r = *s.request;
    SampleRequest d = sample_request(r.params, r.seed, static_cast<uint64_t>(r.num_output_tokens()));
    d.row = s.logits_begin + s.num_logits - 1;
    d.logprobs = r.params.logprobs.value_or(-1);
    if (has_adjustments(r.params)) {
      const std::span<const int32_t> all(r.tokens);
      d.adjustment_begin = static_cast<int32_t>(logit_adjustments.size());
      append_logit_adjustments(r.params, all.first(static_cast<size_t>(r.num_prompt_tokens)),
                               all.subspan(static_cast<size_t>(r.num_prompt_tokens)), adjustment_counts,
                               logit_adjustments);
      d.adjustment_count = static_cast<int32_t>(logit_adjustments.size()) - d.adjustment_begin;
    }
    device_samples.push_back(d);
    step.device_owner.push_back(i);
    if (d.logprobs >= 0) step.logprob_owner.push_back(i);
  }
  // Two host buffers in turn: the step ahead's ids may land while the host still reads this step's.
  step.host_ids = static_cast<int32_t*>(host_ids[next_host_ids].get());
  next_host_ids ^= 1;
  step.status = backend->sample(step.logits, device_samples, logit_adjustments, *device_ids, step.host_ids);
}

void Engine::Impl::advance(const LaunchedStep& step) {
  if (!step.status.is_ok()) return;
  // Device sample k stands in as placeholder -(k + 1), which the next forward pass resolves on the device.
  std::vector<int32_t> placeholders(step.out.scheduled.size(), -1);
  for (size_t k = 0; k < step.device_owner.size(); ++k) {
    placeholders[step.device_owner[k]] = -static_cast<int32_t>(k) - 1;
  }
  for (const ScheduledRequest& s : step.out.scheduled) {
    if (s.request == nullptr || s.request->is_finished()) continue;
    const Request& r = *s.request;
    num_prompt_tokens += std::max(0, std::min(s.num_new_tokens, r.num_prompt_tokens - r.num_computed_tokens));
  }
  scheduler->advance(step.out, placeholders);
}

bool Engine::Impl::may_launch_ahead(const LaunchedStep& step) const { return async && step.status.is_ok(); }

Status Engine::Impl::complete(LaunchedStep& step) {
  drop_finished(step.out);
  if (!step.status.is_ok()) return fail(step.out, step.status);
  const size_t n = step.out.scheduled.size();
  std::vector<RequestEvent> events(n);
  std::vector<int32_t> sampled(n, -1);
  if (Status st = read_prompt_logprobs(step, events); !st) return fail(step.out, st);
  if (Status st = backend->wait_samples(); !st) return fail(step.out, st);
  for (size_t k = 0; k < step.device_owner.size(); ++k) sampled[step.device_owner[k]] = step.host_ids[k];
  if (Status st = read_device_logprobs(step, events); !st) return fail(step.out, st);

  // The text comes first: whether it completed a stop string is the stream's verdict, which the scheduler applies
  // with the other stop checks.
  std::vector<uint8_t> stop_string_hit(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (step.out.scheduled[i].request == nullptr || sampled[i] < 0) continue;
    const auto stream = text_streams.find(step.out.scheduled[i].request->id);
    if (stream == text_streams.end()) continue;
    bool stopped = false;
    events[i].text = stream->second.push(sampled[i], &stopped);
    stop_string_hit[i] = stopped ? 1 : 0;
  }
  scheduler->commit(step.out, sampled, stop_string_hit);
  ++num_steps;

  const double t = now();
  for (size_t i = 0; i < n; ++i) {
    if (step.out.scheduled[i].request == nullptr) continue;
    Request& r = *step.out.scheduled[i].request;
    RequestEvent& e = events[i];
    if (sampled[i] >= 0) {
      e.token_ids.push_back(sampled[i]);
      ++num_generated_tokens;
      if (r.first_token_time == 0.0) r.first_token_time = t;
    }
    if (r.is_finished()) {
      if (const auto stream = text_streams.find(r.id); stream != text_streams.end()) e.text += stream->second.finish();
    } else if (e.token_ids.empty() && e.prompt_logprobs.empty()) {
      continue;  // a prompt chunk with nothing to report
    }
    emit(r, std::move(e));
  }
  return Status::ok();
}

Status Engine::Impl::enqueue_prompt_logprobs(LaunchedStep& step) {
  step.prompt_logprobs.clear();
  logprob_queries.clear();
  int32_t top_k = 0;
  for (size_t i = 0; i < step.out.scheduled.size(); ++i) {
    const ScheduledRequest& s = step.out.scheduled[i];
    if (s.request == nullptr || !s.request->wants_prompt_logprobs()) continue;
    Request& r = *s.request;
    // The scheduler gave every row of the chunk: row j sits at position num_computed + j and predicts the token
    // after it (the step has not advanced the request yet). Rows [j0, j1) predict the prompt tokens not reported
    // yet (targets chunk_begin + j + 1).
    const int32_t chunk_begin = r.num_computed_tokens;
    const int32_t j0 = std::max(0, r.next_prompt_logprob - chunk_begin - 1);
    const int32_t j1 = std::min(s.num_logits, r.num_prompt_tokens - chunk_begin - 1);
    if (j1 <= j0) continue;
    LaunchedStep::PromptLogprobs p;
    p.request = i;
    p.begin = logprob_queries.size();
    p.count = static_cast<size_t>(j1 - j0);
    p.top_k = *r.params.prompt_logprobs;
    p.first_position = r.next_prompt_logprob;
    for (int32_t j = j0; j < j1; ++j) {
      logprob_queries.push_back(
          {s.logits_begin + j, r.tokens[static_cast<size_t>(chunk_begin) + static_cast<size_t>(j) + 1]});
    }
    top_k = std::max(top_k, p.top_k);
    step.prompt_logprobs.push_back(p);
    r.next_prompt_logprob = chunk_begin + j1 + 1;
  }
  if (logprob_queries.empty()) return Status::ok();
  // One call for the step: the backend computes them where the logits are, and only the answers cross from a GPU.
  return backend->enqueue_token_logprobs(step.logits, logprob_queries, top_k);
}

Status Engine::Impl::read_prompt_logprobs(const LaunchedStep& step, std::vector<RequestEvent>& events) {
  if (step.prompt_logprobs.empty()) return Status::ok();
  std::vector<TokenLogprob> answers(step.prompt_logprobs.back().begin + step.prompt_logprobs.back().count);
  PHOTON_RETURN_IF_ERROR(backend->read_token_logprobs(answers));
  for (const LaunchedStep::PromptLogprobs& p : step.prompt_logprobs) {
    if (step.out.scheduled[p.request].request == nullptr) continue;  // finished since: not reported
    RequestEvent& e = events[p.request];
    e.prompt_logprobs_begin = p.first_position;
    e.prompt_logprobs.assign(std::make_move_iterator(answers.begin() + static_cast<std::ptrdiff_t>(p.begin)),
                             std::make_move_iterator(answers.begin() + static_cast<std::ptrdiff_t>(p.begin + p.count)));
    for (TokenLogprob& t : e.prompt_logprobs) {
      if (t.top.size() > static_cast<size_t>(p.top_k)) t.top.resize(static_cast<size_t>(p.top_k));
    }
  }
  return Status::ok();
}

Status Engine::Impl::read_device_logprobs(const LaunchedStep& step, std::vector<RequestEvent>& events) {
  if (step.logprob_owner.empty()) return Status::ok();
  std::vector<TokenLogprob> answers(step.logprob_owner.size());
  PHOTON_RETURN_IF_ERROR(backend->sampled_logprobs(answers));
  for (size_t j = 0; j < answers.size(); ++j) {
    const size_t i = step.logprob_owner[j];
    if (step.out.scheduled[i].request != nullptr) events[i].logprobs.push_back(std::move(answers[j]));
  }
  return Status::ok();
}

Status Engine::Impl::fail(const SchedulerOutput& out, const Status& status) {
  // The batch failed as a whole: finish its requests with the error; the engine stays usable.
  for (const auto& s : out.scheduled) {
    if (s.request != nullptr && scheduler->finish_request(s.request->id, FinishReason::kError)) {
      RequestEvent e;
      e.error = status.message();
      emit(*s.request, std::move(e));
    }
  }
  log::error("step failed: {}", status.to_string());
  return status;
}

Status Engine::Impl::end_step(Status status) {
  // The scheduler deletes its finished requests here; a launched step must not keep pointers to them.
  if (inflight) drop_finished(inflight->out);
  scheduler->remove_finished();
  refresh_stats();
  return status;
}

void Engine::Impl::refresh_stats() {
  const SchedulerStats s = scheduler->stats();
  EngineStats e;
  e.num_running = s.num_running;
  e.num_waiting = s.num_waiting;
  e.num_preemptions = s.num_preemptions;
  e.num_steps = num_steps;
  e.prefix_cache_queries = s.prefix_cache_queries;
  e.prefix_cache_hit_tokens = s.prefix_cache_hits;
  e.num_kv_blocks = s.num_blocks;
  e.num_free_kv_blocks = s.num_free_blocks;
  e.block_size = scheduler->config().block_size;
  e.kv_capacity_tokens = static_cast<int64_t>(s.num_blocks) * e.block_size;
  e.kv_usage = scheduler->block_manager().usage();
  e.weight_bytes = weight_bytes;
  // The processes of a multi-process group hold equal shares (same block count, same head counts per rank).
  const uint64_t processes = group ? static_cast<uint64_t>(group->size()) : 1;
  e.kv_cache_bytes = runner->kv_cache_bytes() * processes;
  e.workspace_bytes = runner->workspace_bytes() * processes;
  e.peak_device_bytes = 0;
  for (const auto& b : backends) {
    e.peak_device_bytes = std::max<uint64_t>(e.peak_device_bytes, b->allocator().peak_bytes());
  }
  e.num_prompt_tokens = num_prompt_tokens;
  e.num_generated_tokens = num_generated_tokens;
  std::lock_guard lock(mu);
  e.num_waiting += static_cast<int32_t>(inbox.size());
  last_stats = e;
}

}  // namespace photon
