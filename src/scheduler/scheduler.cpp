#include "scheduler/scheduler.hpp"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

namespace photon {

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config), blocks_(config.num_blocks, config.block_size, config.enable_prefix_caching) {}

Status Scheduler::add_request(std::unique_ptr<Request> r) {
  const int64_t prompt = r->num_prompt_tokens;
  const int64_t total = prompt + r->params.max_tokens;
  if (prompt == 0) return Status(StatusCode::kInvalidArgument, "the prompt is empty; give at least one token");
  if (total > config_.max_model_len) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the prompt ({} tokens) plus max_tokens ({}) is {} tokens, more than max_model_len "
                              "({}); shorten the prompt or lower max_tokens",
                              prompt, r->params.max_tokens, total, config_.max_model_len));
  }
  const int64_t capacity = static_cast<int64_t>(config_.num_blocks) * config_.block_size;
  if (total > capacity) {
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("the request needs {} tokens of KV cache but the whole cache holds {}; lower max_tokens "
                              "or give the KV cache more memory",
                              total, capacity));
  }
  if (requests_.contains(r->id)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("request id {} is already in use", r->id));
  }
  r->state = RequestState::kWaiting;
  Request* raw = r.get();
  requests_.emplace(r->id, std::move(r));
  waiting_.emplace(key(*raw), raw);
  return Status::ok();
}

void Scheduler::preempt(Request* r) {
  blocks_.release(r->block_table);
  r->num_computed_tokens = 0;
  r->num_hashed_blocks = 0;
  r->block_hashes.clear();
  r->state = RequestState::kPreempted;
  ++r->num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), r));
  waiting_.emplace(key(*r), r);  // its original key puts it ahead of everything that arrived later
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int32_t budget = config_.max_num_batched_tokens;
  int32_t logit_budget = config_.max_num_logits;

  // Plans `n` new tokens for `r` under the logits budget; returns the rows it needs (-1: nothing fits).
  auto plan = [&](Request* r, int32_t& n) -> int32_t {
    n = std::min(r->num_tokens() - r->num_computed_tokens, budget);
    // A request at its length limit is waiting for its last token's commit, which finishes it (async scheduling).
    if (n <= 0 || reaches_length(*r)) return -1;
    if (r->wants_prompt_logprobs()) {
      n = std::min(n, logit_budget);
      return n > 0 ? n : -1;
    }
    const bool sample = r->num_computed_tokens + n == r->num_tokens();
    if (sample && logit_budget < 1) return -1;
    return sample ? 1 : 0;
  };
  auto add = [&](Request* r, int32_t n, int32_t rows) {
    ScheduledRequest s;
    s.request = r;
    s.num_new_tokens = n;
    s.sample = r->num_computed_tokens + n == r->num_tokens();
    s.num_logits = rows;
    out.scheduled.push_back(s);
    budget -= n;
    logit_budget -= rows;
  };

  // 1. Running requests: the next decode token or prompt chunk of each.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    int32_t n = 0;
    const int32_t rows = plan(r, n);
    if (rows < 0) {
      ++i;
      continue;
    }
    bool scheduled = true;
    while (!blocks_.allocate(r->num_computed_tokens + n, r->block_table)) {
      // Out of blocks: preempt the lowest-priority, most recently admitted running request.
      Request* victim =
          *std::max_element(running_.begin(), running_.end(), [](Request* a, Request* b) { return key(*a) < key(*b); });
      const auto victim_pos =
          static_cast<size_t>(std::find(running_.begin(), running_.end(), victim) - running_.begin());
      // A victim scheduled earlier this step gives its budget back.
      for (auto it = out.scheduled.begin(); it != out.scheduled.end(); ++it) {
        if (it->request == victim) {
          budget += it->num_new_tokens;
          logit_budget += it->num_logits;
          out.scheduled.erase(it);
          break;
        }
      }
      preempt(victim);
      out.preempted.push_back(victim->id);
      if (victim_pos < i) --i;
      if (victim == r) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) continue;  // r left running_; index i now names the next request
    add(r, n, rows);
    ++i;
  }

  // 2. Waiting requests, in (priority, arrival) order, unless this step had to preempt.
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    Request* r = waiting_.begin()->second;
    const bool first_admission = r->state == RequestState::kWaiting;
    // Prompt logprobs need logits at every prompt position, so such requests compute their prompt in full.
    if (r->block_table.empty() && !r->params.prompt_logprobs) {
      // Reused blocks are re-hashed by cache_full_blocks after this step, from the tokens.
      r->num_computed_tokens = blocks_.acquire_cached_prefix(r->tokens, r->block_table);
      r->num_hashed_blocks = 0;
      r->block_hashes.clear();
    }
    int32_t n = 0;
    const int32_t rows = plan(r, n);
    if (rows < 0 || !blocks_.allocate(r->num_computed_tokens + n, r->block_table)) {
      blocks_.release(r->block_table);
      r->num_computed_tokens = 0;
      break;
    }
    if (first_admission) {
      prefix_queries_ += r->num_prompt_tokens;
      prefix_hits_ += r->num_computed_tokens;
      r->num_cached_prompt_tokens = r->num_computed_tokens;
    }
    waiting_.erase(waiting_.begin());
    r->state = RequestState::kRunning;
    running_.push_back(r);
    add(r, n, rows);
  }

  int32_t row = 0;
  for (auto& s : out.scheduled) {
    s.logits_begin = row;
    row += s.num_logits;
    out.num_tokens += s.num_new_tokens;
  }
  out.num_logits = row;
  return out;
}

bool Scheduler::reaches_length(const Request& r) const {
  return r.num_output_tokens() >= r.params.max_tokens || r.num_tokens() >= config_.max_model_len;
}

bool Scheduler::check_stop(Request& r, bool stop_string_hit) const {
  const int32_t last = r.tokens.back();
  if (reaches_length(r)) r.finish_reason = FinishReason::kLength;
  const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), last) != eos_ids_.end();
  const auto& stops = r.params.stop_token_ids;
  if (stop_string_hit || (is_eos && !r.params.ignore_eos) ||
      std::find(stops.begin(), stops.end(), last) != stops.end()) {
    r.finish_reason = FinishReason::kStop;
  }
  return r.finish_reason != FinishReason::kNone;
}

std::vector<Request*> Scheduler::update(const SchedulerOutput& output, std::span<const int32_t> sampled,
                                        std::span<const uint8_t> stop_string_hit) {
  advance(output, sampled);
  return commit(output, sampled, stop_string_hit);
}

void Scheduler::advance(const SchedulerOutput& output, std::span<const int32_t> placeholders) {
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    const ScheduledRequest& s = output.scheduled[i];
    Request* r = s.request;
    if (r == nullptr || r->is_finished()) continue;
    r->num_computed_tokens += s.num_new_tokens;
    // Only computed tokens are hashed, so a placeholder never reaches the prefix cache.
    blocks_.cache_full_blocks(r->tokens, r->num_computed_tokens, r->block_table, &r->num_hashed_blocks,
                              r->block_hashes);
    if (s.sample) r->tokens.push_back(placeholders[i]);
  }
}

std::vector<Request*> Scheduler::commit(const SchedulerOutput& output, std::span<const int32_t> sampled,
                                        std::span<const uint8_t> stop_string_hit) {
  std::vector<Request*> finished;
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    const ScheduledRequest& s = output.scheduled[i];
    Request* r = s.request;
    if (r == nullptr || r->is_finished() || !s.sample) continue;
    r->tokens.back() = sampled[i];  // advance() appended it; nothing is appended between the two
    if (check_stop(*r, !stop_string_hit.empty() && stop_string_hit[i] != 0)) {
      free_request(r);
      finished.push_back(r);
    }
  }
  return finished;
}

void Scheduler::free_request(Request* r) {
  blocks_.release(r->block_table);
  if (r->state == RequestState::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), r));
  } else if (r->state == RequestState::kWaiting || r->state == RequestState::kPreempted) {
    waiting_.erase(key(*r));
  }
  r->state = RequestState::kFinished;
  finished_.push_back(r);
}

bool Scheduler::finish_request(uint64_t id, FinishReason reason) {
  Request* r = find(id);
  if (r == nullptr || r->is_finished()) return false;
  r->finish_reason = reason;
  free_request(r);
  return true;
}

void Scheduler::remove_finished() {
  for (Request* r : finished_) requests_.erase(r->id);
  finished_.clear();
}

Request* Scheduler::find(uint64_t id) {
  const auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.num_running = static_cast<int32_t>(running_.size());
  s.num_waiting = static_cast<int32_t>(waiting_.size());
  s.num_preemptions = num_preemptions_;
  s.prefix_cache_queries = prefix_queries_;
  s.prefix_cache_hits = prefix_hits_;
  s.num_free_blocks = blocks_.num_free_blocks();
  s.num_blocks = blocks_.num_blocks();
  return s;
}

Status Scheduler::check_invariants() const {
  auto fail = [](std::string m) { return Status(StatusCode::kInternal, std::move(m)); };
  if (static_cast<int32_t>(running_.size()) > config_.max_num_seqs) return fail("more running than max_num_seqs");
  std::unordered_map<int32_t, int32_t> refs;
  for (const auto& [id, r] : requests_) {
    for (int32_t b : r->block_table) ++refs[b];
    switch (r->state) {
      case RequestState::kRunning:
        if (std::find(running_.begin(), running_.end(), r.get()) == running_.end()) return fail("running not listed");
        if (static_cast<int64_t>(r->block_table.size()) * config_.block_size < r->num_computed_tokens) {
          return fail(fmt::format("request {} computed {} tokens but owns {} blocks", id, r->num_computed_tokens,
                                  r->block_table.size()));
        }
        break;
      case RequestState::kWaiting:
      case RequestState::kPreempted:
        if (!waiting_.contains(key(*r))) return fail("waiting request not queued");
        if (!r->block_table.empty() || r->num_computed_tokens != 0) return fail("waiting request holds blocks");
        break;
      case RequestState::kFinished:
        if (!r->block_table.empty()) return fail("finished request holds blocks");
        break;
    }
    if (r->num_computed_tokens > r->num_tokens()) return fail("computed more tokens than exist");
  }
  for (const auto& [block, count] : refs) {
    if (blocks_.ref_count(block) != count) {
      return fail(fmt::format("block {} has reference count {} but {} owners", block, blocks_.ref_count(block), count));
    }
  }
  if (blocks_.num_referenced_blocks() != static_cast<int32_t>(refs.size())) return fail("a block leaked");
  if (blocks_.num_free_blocks() != blocks_.num_blocks() - static_cast<int32_t>(refs.size())) {
    return fail("free count disagrees with ownership");
  }
  return Status::ok();
}

}  // namespace photon
