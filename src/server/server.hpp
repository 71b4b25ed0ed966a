// The OpenAI-compatible HTTP server over a photon::Engine: POST /v1/chat/completions and /v1/completions (streamed
// as server-sent events or whole), GET /v1/models, GET /health, GET /metrics (Prometheus), POST /tokenize and
// /detokenize. Built on Boost.Beast with C++20 coroutines: a few threads serve thousands of connections, and the
// engine runs its own step loop (Engine::start). Uses only the public Engine API.
//
// Thread safety: create() on one thread; port(), set_engine() and shutdown() from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <photon/engine.hpp>

namespace photon::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 5728;  ///< 0: any free port (see Server::port)
  /// The model id clients send and /v1/models lists; requests naming another model get 404.
  std::string served_model_name = "photon";
  /// When non-empty, /v1/* and /tokenize, /detokenize need "Authorization: Bearer <api_key>" (401 otherwise).
  std::string api_key;
  /// Requests waiting for the engine (not yet running) beyond which new ones get 429.
  int max_queue = 4096;
  /// Request bodies above this size get 413.
  size_t max_body_bytes = size_t{8} << 20;
  /// Origins browsers may call the API from (CORS), e.g. "http://localhost:3000"; "*" for any. Empty: none.
  std::vector<std::string> allowed_origins;
  /// Threads that run the connections.
  int io_threads = 2;
};

class Server {
 public:
  /// Binds and listens on host:port and starts serving: /health answers 503 and the API 503 until set_engine().
  /// Errors: an address that cannot be bound (in use, not local), bad settings.
  static Result<std::unique_ptr<Server>> create(const ServerConfig& config);
  /// Shuts down (cancelling what still runs) if shutdown() was not called.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The port listened on (the chosen one when the config said 0).
  uint16_t port() const;
  /// Starts serving `engine` (owned from here on; its step loop is started). Errors: a second engine, the step
  /// loop not starting.
  Status set_engine(std::unique_ptr<Engine> engine);
  /// Stops accepting connections, gives requests in flight up to `grace_seconds` to finish, cancels the rest,
  /// closes every connection and joins the threads. Idempotent; blocks.
  void shutdown(double grace_seconds);

 private:
  Server();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace photon::server
