// The server's Prometheus metrics (GET /metrics, text exposition format 0.0.4, names prefixed photon_): requests by
// finish reason, prompt and generated tokens, time to first token, inter-token and end-to-end latency histograms,
// and the engine's gauges (running and waiting requests, KV-cache usage, prefix-cache hit rate, preemptions).
// Thread-safe: connections record from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <photon/engine.hpp>

namespace photon::server {

/// A cumulative histogram over fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double seconds);
  /// `name`_bucket{le=...}, `name`_sum and `name`_count lines.
  void render(const std::string& name, const std::string& help, std::string& out) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, the last one +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  /// One finished request (one choice): its finish reason and token counts, and its latencies from the event
  /// timestamps (arrival, first token, finish; seconds on the engine's clock).
  void record_finished(const RequestEvent& last);
  /// The gap between two consecutive token events of one request, in seconds, per token of the later one.
  void record_inter_token(double seconds);
  /// A request rejected before reaching the engine (bad input, auth, queue full), by HTTP status.
  void record_rejected(int http_status);
  /// The exposition text, with the engine's gauges from `stats` (null while loading).
  std::string render(const EngineStats* stats) const;

 private:
  std::array<std::atomic<uint64_t>, 5> finished_{};  // by FinishReason
  std::atomic<uint64_t> prompt_tokens_{0}, generation_tokens_{0}, cached_prompt_tokens_{0};
  mutable std::mutex rejected_mu_;
  std::vector<std::pair<int, uint64_t>> rejected_;
  Histogram ttft_, itl_, e2e_;
};

}  // namespace photon::server
