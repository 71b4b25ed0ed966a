#include "server/metrics.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace photon::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double seconds) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin();
  std::lock_guard lock(mu_);
  ++counts_[bucket];
  sum_ += seconds;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  std::lock_guard lock(mu_);
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  cumulative += counts_.back();
  out +=
      fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cumulative, name, sum_, name, count_);
}

namespace {

std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,
          0.5,   0.75,   1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
}

void counter(std::string& out, const std::string& name, const std::string& help, uint64_t value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, value);
}

void gauge(std::string& out, const std::string& name, const std::string& help, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, value);
}

}  // namespace

Metrics::Metrics() : ttft_(latency_bounds()), itl_(latency_bounds()), e2e_(latency_bounds()) {}

void Metrics::record_finished(const RequestEvent& e) {
  finished_[std::min<size_t>(static_cast<size_t>(e.finish_reason), finished_.size() - 1)]++;
  prompt_tokens_ += static_cast<uint64_t>(e.num_prompt_tokens);
  cached_prompt_tokens_ += static_cast<uint64_t>(e.num_cached_prompt_tokens);
  generation_tokens_ += static_cast<uint64_t>(e.num_output_tokens);
  if (e.first_token_time > 0.0) ttft_.observe(e.first_token_time - e.arrival_time);
  if (e.finish_time > 0.0) e2e_.observe(e.finish_time - e.arrival_time);
}

void Metrics::record_inter_token(double seconds) { itl_.observe(seconds); }

void Metrics::record_rejected(int http_status) {
  std::lock_guard lock(rejected_mu_);
  for (auto& [status, count] : rejected_) {
    if (status == http_status) {
      ++count;
      return;
    }
  }
  rejected_.emplace_back(http_status, 1);
}

std::string Metrics::render(const EngineStats* s) const {
  std::string out;
  out +=
      "# HELP photon_request_success_total Finished requests (choices) by finish reason.\n"
      "# TYPE photon_request_success_total counter\n";
  constexpr const char* kReasons[] = {"none", "stop", "length", "cancelled", "error"};
  for (size_t i = 1; i < finished_.size(); ++i) {
    out += fmt::format("photon_request_success_total{{finished_reason=\"{}\"}} {}\n", kReasons[i], finished_[i].load());
  }
  {
    std::lock_guard lock(rejected_mu_);
    out +=
        "# HELP photon_request_rejected_total Requests answered with an error before reaching the engine.\n"
        "# TYPE photon_request_rejected_total counter\n";
    for (const auto& [status, count] : rejected_) {
      out += fmt::format("photon_request_rejected_total{{status=\"{}\"}} {}\n", status, count);
    }
  }
  counter(out, "photon_prompt_tokens_total", "Prompt tokens of finished requests.", prompt_tokens_);
  counter(out, "photon_generation_tokens_total", "Generated tokens of finished requests.", generation_tokens_);
  ttft_.render("photon_time_to_first_token_seconds", "Time from arrival to the first generated token.", out);
  itl_.render("photon_inter_token_latency_seconds", "Time between consecutive generated tokens.", out);
  e2e_.render("photon_e2e_request_latency_seconds", "Time from arrival to the last token.", out);
  if (s != nullptr) {
    gauge(out, "photon_num_requests_running", "Requests being computed.", s->num_running);
    gauge(out, "photon_num_requests_waiting", "Requests waiting to be scheduled.", s->num_waiting);
    gauge(out, "photon_kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0 to 1).", s->kv_usage);
    counter(out, "photon_num_preemptions_total", "Requests preempted for KV space.",
            static_cast<uint64_t>(s->num_preemptions));
    counter(out, "photon_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            static_cast<uint64_t>(s->prefix_cache_queries));
    counter(out, "photon_prefix_cache_hits_total", "Prompt tokens served from the prefix cache.",
            static_cast<uint64_t>(s->prefix_cache_hit_tokens));
    gauge(out, "photon_prefix_cache_hit_rate", "Prefix-cache hits over queries so far.",
          s->prefix_cache_queries > 0
              ? static_cast<double>(s->prefix_cache_hit_tokens) / static_cast<double>(s->prefix_cache_queries)
              : 0.0);
  }
  return out;
}

}  // namespace photon::server
