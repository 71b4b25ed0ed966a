// What every connection of a Server shares: the configuration, the engine once loaded, the event router and the
// metrics. Internal to the server library.
#pragma once

#include <atomic>
#include <memory>

#include <photon/engine.hpp>

#include "server/event_router.hpp"
#include "server/http.hpp"
#include "server/metrics.hpp"
#include "server/openai_request.hpp"
#include "server/server.hpp"

namespace photon::server {

struct ServerContext {
  ServerConfig config;
  /// Null while the model loads; set once (the engine and router then live until the server is destroyed).
  std::atomic<Engine*> engine{nullptr};
  std::unique_ptr<Engine> owned_engine;
  std::unique_ptr<EventRouter> router;
  /// The tokenizer knows Qwen3's <think> and </think>: split reasoning from content.
  bool reasoning = false;
  /// Shutting down: new generation requests get 503.
  std::atomic<bool> draining{false};
  /// Generation requests being answered.
  std::atomic<int> in_flight{0};
  Metrics metrics;

  /// CORS headers for a request from an allowed origin, else none.
  ExtraHeaders cors(const HttpRequest& req) const;
};

/// Answers POST /v1/chat/completions or /v1/completions on `stream`. Returns false when the connection must close
/// (it failed, or the client went away mid-stream; its requests are then cancelled).
net::awaitable<bool> serve_generation(ServerContext& ctx, HttpStream& stream, const HttpRequest& req,
                                      Endpoint endpoint);

}  // namespace photon::server
