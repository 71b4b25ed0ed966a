// photon serve (and the photon_web_server executable): the OpenAI-compatible HTTP server over one engine. Listens
// first (GET /health answers 503 while the model loads), then loads the model and serves until SIGINT or SIGTERM,
// which stop accepting, give requests in flight a grace period and exit 0.
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <future>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <photon/engine.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "engine_flags.hpp"
#include "progress.hpp"
#include "server/server.hpp"

namespace photon::cli {
namespace {

// vLLM's server defaults on large GPUs (1,024 sequences, 8,192 tokens a step); elsewhere 256 and 2,048.
constexpr EngineFlagDefaults kEngineDefaults{"auto", 256, 2048, 1024, 8192};

Args make_args(const std::string& program) {
  Args a(program + " --model DIR|dummy:NAME [--tokenizer DIR|FILE] [--host 127.0.0.1] [--port 5728] [options]",
         "Serves the model over HTTP with the OpenAI API (POST /v1/chat/completions, /v1/completions, streamed as "
         "server-sent events; GET /v1/models, /health, /metrics; POST /tokenize, /detokenize). Stops on SIGINT or "
         "SIGTERM after requests in flight finish (or the grace period ends).");
  a.option("host", "ADDR", "IP address to listen on (0.0.0.0 for every interface)", "127.0.0.1");
  a.option("port", "N", "TCP port (0: any free one, printed at start)", "5728");
  a.option("served-model-name", "NAME", "the model id clients send and /v1/models lists (default: --model)");
  a.option("api-key", "KEY", "require \"Authorization: Bearer KEY\" on /v1/* and /tokenize, /detokenize");
  a.option("max-queue", "N", "requests waiting for the engine beyond which new ones get 429", "4096");
  a.option("chat-template", "FILE", "a Jinja chat template to use instead of the tokenizer folder's");
  a.option("allowed-origins", "LIST", "comma-separated origins browsers may call the API from (CORS), or *");
  a.option("io-threads", "N", "threads serving the connections", "2");
  a.option("max-body-bytes", "N", "largest request body accepted (413 above)", "8388608");
  a.option("shutdown-grace", "SECONDS", "how long requests in flight may run on after SIGINT / SIGTERM", "10");
  add_engine_flags(a, kEngineDefaults);
  return a;
}

Status bad(std::string message) { return Status(StatusCode::kInvalidArgument, std::move(message)); }

Status read_options(const Args& a, server::ServerConfig& s, EngineConfig& e, double& grace) {
  PHOTON_RETURN_IF_ERROR(read_engine_config(a, kEngineDefaults, e));
  s.host = a.get("host");
  PHOTON_ASSIGN_OR_RETURN(int64_t port, a.get_int("port", 0, 65535));
  s.port = static_cast<uint16_t>(port);
  s.served_model_name = a.has("served-model-name") ? a.get("served-model-name") : e.model;
  if (s.served_model_name.empty()) return bad("--served-model-name must not be empty");
  s.api_key = a.get("api-key");
  if (a.has("api-key") && s.api_key.empty()) return bad("--api-key must not be empty");
  PHOTON_ASSIGN_OR_RETURN(int64_t queue, a.get_int("max-queue", 1, 1 << 24));
  s.max_queue = static_cast<int>(queue);
  PHOTON_ASSIGN_OR_RETURN(int64_t threads, a.get_int("io-threads", 1, 256));
  s.io_threads = static_cast<int>(threads);
  PHOTON_ASSIGN_OR_RETURN(int64_t body, a.get_int("max-body-bytes", 1024, int64_t{1} << 32));
  s.max_body_bytes = static_cast<size_t>(body);
  PHOTON_ASSIGN_OR_RETURN(grace, a.get_double("shutdown-grace", 0.0, 3600.0));
  std::stringstream origins(a.get("allowed-origins"));
  for (std::string o; std::getline(origins, o, ',');) {
    if (!o.empty()) s.allowed_origins.push_back(o);
  }
  e.chat_template = a.get("chat-template");
  return Status::ok();
}

// Listens, loads the model, serves until SIGINT or SIGTERM, then drains for up to `grace` seconds.
Status serve(const char* program, const server::ServerConfig& sc, EngineConfig ec, double grace) {
  // SIGINT and SIGTERM are taken by sigwait below: block them before any thread starts, so every thread inherits it.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  PHOTON_ASSIGN_OR_RETURN(std::unique_ptr<server::Server> server, server::Server::create(sc));
  fmt::print(stderr, "{}: listening on http://{}:{} (GET /health is 503 until the model is loaded)\n", program, sc.host,
             server->port());
  // One thread takes the signals: while the model loads the first one ends the process at once (nothing is served
  // yet); afterwards it hands the signal to this thread, which drains.
  std::atomic<bool> loaded{false};
  std::promise<int> stop_requested;
  std::thread signal_watch([&stop_signals, &loaded, &stop_requested] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (!loaded) std::_Exit(0);
    stop_requested.set_value(sig);
  });
  signal_watch.detach();
  ProgressBar bar("loading " + ec.model);
  ec.load_progress = [&](uint64_t d, uint64_t t) { bar.update(d, t); };
  auto engine = Engine::create(ec);
  bar.finish();
  if (!engine) return engine.status();
  const ModelInfo info = (*engine)->model_info();
  PHOTON_RETURN_IF_ERROR(server->set_engine(std::move(*engine)));
  fmt::print(stderr, "{}: serving '{}' ({}, max_model_len {}) on {}; stop with Ctrl-C\n", program, sc.served_model_name,
             info.architecture, info.max_model_len, info.device_description);
  std::fflush(stderr);
  std::future<int> stop = stop_requested.get_future();
  loaded = true;
  const int sig = stop.get();
  fmt::print(stderr, "{}: {} received: finishing requests in flight (up to {} s)\n", program,
             sig == SIGINT ? "SIGINT" : "SIGTERM", grace);
  server->shutdown(grace);
  return Status::ok();
}

}  // namespace

int run_serve(int argc, char** argv, int first, const char* program) {
  Args args = make_args(program);
  server::ServerConfig sc;
  EngineConfig ec;
  double grace = 10.0;
  return run_command(
      args, argc, argv, first, program, [&] { return read_options(args, sc, ec, grace); },
      [&] { return serve(program, sc, std::move(ec), grace); });
}

int run_serve(int argc, char** argv) { return run_serve(argc, argv, 2, "photon serve"); }

}  // namespace photon::cli
