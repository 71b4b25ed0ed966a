#include "server/server.hpp"

#include <pthread.h>

#include <chrono>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <nlohmann/json.hpp>
#include <photon/tokenizer.hpp>

#include "server/context.hpp"
#include "server/web_assets.hpp"

namespace photon::server {
namespace {

using tcp = net::ip::tcp;
using Json = nlohmann::ordered_json;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Equal strings in time that depends only on their lengths, so a wrong API key reveals nothing by timing.
bool constant_time_equal(std::string_view given, std::string_view key) {
  if (key.empty()) return false;
  unsigned diff = given.size() == key.size() ? 0u : 1u;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i]) ^ static_cast<unsigned char>(key[i % key.size()]);
  }
  return diff == 0;
}

struct Route {
  std::string_view path;
  http::verb method;
  bool needs_key;
};
constexpr Route kRoutes[] = {
    {"/health", http::verb::get, false},         {"/metrics", http::verb::get, false},
    {"/v1/models", http::verb::get, true},       {"/v1/chat/completions", http::verb::post, true},
    {"/v1/completions", http::verb::post, true}, {"/tokenize", http::verb::post, true},
    {"/detokenize", http::verb::post, true},
};

// POST /tokenize {"prompt": text, "add_special_tokens": true} -> {"tokens", "count", "max_model_len"};
// POST /detokenize {"tokens": [ids]} -> {"prompt"}.
std::variant<Json, ApiError> tokenize_body(const Engine& engine, const std::string& request_body, bool detokenize) {
  const Tokenizer* tok = engine.tokenizer();
  if (tok == nullptr) return ApiError::bad_request("this model has no tokenizer");
  const Json body = Json::parse(request_body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return ApiError::bad_request("the request body must be a JSON object");
  if (detokenize) {
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array())
      return ApiError::bad_request("'tokens' must be a list of token ids", "tokens");
    std::vector<int32_t> ids;
    for (const Json& x : *it) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tok->vocab_size()) {
        return ApiError::bad_request(fmt::format("'tokens' must hold ids from 0 to {}", tok->vocab_size() - 1),
                                     "tokens");
      }
      ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
    auto text = tok->decode(ids);
    if (!text) return ApiError::from_status(text.status());
    return Json{{"prompt", *text}};
  }
  auto it = body.find("prompt");
  if (it == body.end() || !it->is_string()) return ApiError::bad_request("'prompt' must be a string", "prompt");
  bool special = true;
  if (auto s = body.find("add_special_tokens"); s != body.end()) {
    if (!s->is_boolean()) {
      return ApiError::bad_request("'add_special_tokens' must be true or false", "add_special_tokens");
    }
    special = s->get<bool>();
  }
  const std::vector<int32_t> ids = tok->encode(it->get<std::string>(), special);
  return Json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine.model_info().max_model_len}};
}

}  // namespace

ExtraHeaders ServerContext::cors(const HttpRequest& req) const {
  const auto origin = req.find(http::field::origin);
  if (origin == req.end()) return {};
  const std::string value(origin->value());
  for (const std::string& allowed : config.allowed_origins) {
    if (allowed == "*" || allowed == value) {
      return {{"Access-Control-Allow-Origin", allowed == "*" ? "*" : value}, {"Vary", "Origin"}};
    }
  }
  return {};
}

struct Server::Impl {
  std::unique_ptr<net::io_context> ioc = std::make_unique<net::io_context>();
  ServerContext ctx;
  // Destroyed before the io_context they belong to (shutdown() resets them in this order).
  std::unique_ptr<tcp::acceptor> acceptor = std::make_unique<tcp::acceptor>(*ioc);
  // The accept loop and the acceptor's close run on this strand (an acceptor is not thread-safe).
  std::optional<net::strand<net::io_context::executor_type>> accept_strand{net::make_strand(*ioc)};
  uint16_t port = 0;
  std::vector<std::thread> threads;
  std::mutex shutdown_mu;
  bool shut_down = false;

  net::awaitable<void> accept_loop();
  net::awaitable<void> session(tcp::socket socket);
  net::awaitable<bool> route(HttpStream& stream, const HttpRequest& req);
  net::awaitable<bool> error(HttpStream& stream, const HttpRequest& req, const ApiError& e);
};

net::awaitable<void> Server::Impl::accept_loop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor->async_accept(net::make_strand(*ioc), kAwait);
    if (ec) {
      if (!acceptor->is_open()) co_return;
      // E.g. too many open files: pause rather than spin, and keep serving the connections there are.
      net::steady_timer pause(co_await net::this_coro::executor, std::chrono::milliseconds(20));
      co_await pause.async_wait(kAwait);
      continue;
    }
    auto executor = socket.get_executor();
    net::co_spawn(executor, session(std::move(socket)), net::detached);
  }
}

net::awaitable<void> Server::Impl::session(tcp::socket socket) {
  HttpStream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(ctx.config.max_body_bytes);
    stream.expires_after(std::chrono::seconds(120));  // an idle or trickling client
    auto [ec, n] = co_await http::async_read(stream, buffer, parser, kAwait);
    if (ec == http::error::body_limit) {
      ApiError e = ApiError::bad_request(
          fmt::format("the request body is larger than the server's limit of {} bytes", ctx.config.max_body_bytes));
      e.status = 413;
      stream.expires_after(std::chrono::seconds(10));
      HttpRequest req = parser.release();
      req.keep_alive(false);
      co_await error(stream, req, e);
      break;
    }
    if (ec == http::error::end_of_stream || ec == net::error::operation_aborted || ec == beast::error::timeout ||
        ec == net::error::connection_reset || ec == net::error::eof) {
      break;
    }
    if (ec) {
      HttpRequest req;
      req.version(11);
      req.keep_alive(false);
      stream.expires_after(std::chrono::seconds(10));
      const ApiError e = ApiError::bad_request("malformed HTTP request: " + ec.message());
      co_await error(stream, req, e);
      break;
    }
    stream.expires_never();  // generation may take long; a dead client is seen when a write fails
    HttpRequest req = parser.release();
    const bool ok = co_await route(stream, req);
    if (!ok || !req.keep_alive()) break;
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

net::awaitable<bool> Server::Impl::error(HttpStream& stream, const HttpRequest& req, const ApiError& e) {
  ctx.metrics.record_rejected(e.status);
  co_return co_await send_response(stream, req, static_cast<http::status>(e.status), kJsonType, e.body(),
                                   ctx.cors(req));
}

net::awaitable<bool> Server::Impl::route(HttpStream& stream, const HttpRequest& req) {
  std::string_view target = req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  // The chat page: public (its script sends the API key the user types), and no inline script may run on it.
  if (req.method() == http::verb::get) {
    for (const WebAsset& asset : web_assets()) {
      if (asset.path == path || (path == "/" && asset.path == "/index.html")) {
        const ExtraHeaders page_headers = {
            {"Content-Security-Policy",
             "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
             "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
            {"X-Content-Type-Options", "nosniff"},
            {"Cache-Control", "no-cache"}};
        co_return co_await send_response(stream, req, http::status::ok, asset.content_type, std::string(asset.body),
                                         page_headers);
      }
    }
  }
  const Route* route = nullptr;
  for (const Route& r : kRoutes) {
    if (r.path == path) route = &r;
  }
  if (route == nullptr) {
    ApiError e = ApiError::bad_request(fmt::format("no route {} {}", std::string(req.method_string()), path));
    e.status = 404;
    e.type = "not_found_error";
    co_return co_await error(stream, req, e);
  }
  ExtraHeaders headers = ctx.cors(req);
  if (req.method() == http::verb::options && !headers.empty()) {  // CORS preflight
    headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
    headers.emplace_back("Access-Control-Max-Age", "600");
    co_return co_await send_response(stream, req, http::status::no_content, kTextType, std::string(), headers);
  }
  if (req.method() != route->method) {
    ApiError e = ApiError::bad_request(fmt::format(
        "{} takes {}, not {}", path, std::string(http::to_string(route->method)), std::string(req.method_string())));
    e.status = 405;
    co_return co_await error(stream, req, e);
  }
  if (route->needs_key && !ctx.config.api_key.empty()) {
    const auto auth = req.find(http::field::authorization);
    const std::string_view given = auth == req.end() ? std::string_view() : std::string_view(auth->value());
    const std::string_view kBearer = "Bearer ";
    if (!given.starts_with(kBearer) || !constant_time_equal(given.substr(kBearer.size()), ctx.config.api_key)) {
      ApiError e = ApiError::bad_request("a missing or wrong API key; send \"Authorization: Bearer <key>\"");
      e.status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      co_return co_await error(stream, req, e);
    }
  }
  Engine* engine = ctx.engine.load();
  if (path == "/health") {
    std::string body = engine ? R"({"status":"ok"})" : R"({"status":"loading"})";
    co_return co_await send_response(stream, req, engine ? http::status::ok : http::status::service_unavailable,
                                     kJsonType, std::move(body), headers);
  }
  if (path == "/metrics") {
    const EngineStats stats = engine ? engine->stats() : EngineStats{};
    co_return co_await send_response(stream, req, http::status::ok, kPrometheusType,
                                     ctx.metrics.render(engine ? &stats : nullptr), headers);
  }
  if (path == "/v1/chat/completions") co_return co_await serve_generation(ctx, stream, req, Endpoint::kChat);
  if (path == "/v1/completions") co_return co_await serve_generation(ctx, stream, req, Endpoint::kCompletion);
  if (engine == nullptr) {
    ApiError e;
    e.status = 503;
    e.type = "server_error";
    e.message = "the model is still loading; retry when GET /health answers 200";
    co_return co_await error(stream, req, e);
  }
  if (path == "/v1/models") {
    Json model = {{"id", ctx.config.served_model_name},
                  {"object", "model"},
                  {"created", 0},
                  {"owned_by", "photon"},
                  {"max_model_len", engine->model_info().max_model_len}};
    std::string body = dump({{"object", "list"}, {"data", Json::array({model})}});
    co_return co_await send_response(stream, req, http::status::ok, kJsonType, std::move(body), headers);
  }
  const bool detokenize = path == "/detokenize";
  auto result = tokenize_body(*engine, req.body(), detokenize);
  if (auto* e = std::get_if<ApiError>(&result)) co_return co_await error(stream, req, *e);
  co_return co_await send_response(stream, req, http::status::ok, kJsonType, dump(std::get<Json>(result)), headers);
}

Server::Server() : impl_(std::make_unique<Impl>()) {}

Server::~Server() { shutdown(0.0); }

Result<std::unique_ptr<Server>> Server::create(const ServerConfig& config) {
  if (config.io_threads < 1 || config.io_threads > 256) {
    return Status(StatusCode::kInvalidArgument, "the server needs 1 to 256 I/O threads");
  }
  if (config.max_queue < 1) return Status(StatusCode::kInvalidArgument, "--max-queue must be at least 1");
  std::unique_ptr<Server> server(new Server());
  Impl& m = *server->impl_;
  m.ctx.config = config;
  beast::error_code ec;
  const auto address = net::ip::make_address(config.host, ec);
  if (ec) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("--host '{}' is not an IP address (use 127.0.0.1, 0.0.0.0 or ::1)", config.host));
  }
  const tcp::endpoint endpoint(address, config.port);
  m.acceptor->open(endpoint.protocol(), ec);
  if (!ec) m.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor->bind(endpoint, ec);
  if (!ec) m.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(StatusCode::kIoError,
                  fmt::format("cannot listen on {}:{}: {}{}", config.host, config.port, ec.message(),
                              ec == net::error::address_in_use ? " (choose another --port)" : ""));
  }
  m.port = m.acceptor->local_endpoint().port();
  net::co_spawn(*m.accept_strand, m.accept_loop(), net::detached);
  for (int i = 0; i < config.io_threads; ++i) {
    m.threads.emplace_back([&m] {
      pthread_setname_np(pthread_self(), "photon-http");
      m.ioc->run();
    });
  }
  return server;
}

uint16_t Server::port() const { return impl_->port; }

Status Server::set_engine(std::unique_ptr<Engine> engine) {
  ServerContext& ctx = impl_->ctx;
  if (ctx.owned_engine) return Status(StatusCode::kInvalidArgument, "the server already has an engine");
  if (!engine) return Status(StatusCode::kInvalidArgument, "the engine is null");
  const Tokenizer* tok = engine->tokenizer();
  ctx.reasoning = tok != nullptr && tok->token_to_id("<think>") && tok->token_to_id("</think>");
  PHOTON_RETURN_IF_ERROR(engine->start());
  ctx.router =
      std::make_unique<EventRouter>(*engine, [&ctx](const RequestEvent& e) { ctx.metrics.record_finished(e); });
  ctx.owned_engine = std::move(engine);
  ctx.engine.store(ctx.owned_engine.get());
  return Status::ok();
}

void Server::shutdown(double grace_seconds) {
  Impl& m = *impl_;
  std::lock_guard lock(m.shutdown_mu);
  if (m.shut_down) return;
  m.shut_down = true;
  m.ctx.draining = true;
  net::post(*m.accept_strand, [&m] {
    beast::error_code ignored;
    m.acceptor->close(ignored);
  });
  // Requests in flight finish within the grace period, else they are cancelled (and finish at the next step).
  const auto wait_for_idle = [&](double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (m.ctx.in_flight > 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  wait_for_idle(grace_seconds);
  if (m.ctx.in_flight > 0 && m.ctx.router) {
    m.ctx.router->cancel_all();
    wait_for_idle(5.0);
  }
  // The router stops first, while the connections' executors still run: its channels must not deliver into an
  // io_context that is gone.
  if (m.ctx.router) m.ctx.router->stop();
  m.ioc->stop();
  for (std::thread& t : m.threads) t.join();
  m.threads.clear();
  m.acceptor.reset();
  m.accept_strand.reset();
  m.ioc.reset();  // destroys the connections' coroutines while the context they use still exists
  m.ctx.router.reset();
  if (m.ctx.owned_engine) m.ctx.owned_engine->stop();
}

}  // namespace photon::server
