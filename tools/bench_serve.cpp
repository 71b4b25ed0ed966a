// photon bench serve: the serving benchmark (what vLLM's benchmark_serving reports) against any OpenAI-compatible
// server. N streamed /v1/completions requests of I random prompt ids, each generating exactly O tokens (EOS ignored),
// sent all at once, at a Poisson rate (--request-rate) or with at most C in flight (--max-concurrency), one TCP
// connection each. Reports request and token throughput, TTFT, TPOT, inter-token latency and end-to-end latency
// (mean, p50, p90, p99); with --json a last stdout line
// {"num_prompts", "completed", "failed", "duration_s", "request_throughput", "input_tok_per_s", "output_tok_per_s",
//  "total_tok_per_s", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"} (each latency {"mean", "p50", "p90", "p99"}).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "latency_stats.hpp"

namespace photon::cli {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr auto kAwait = net::as_tuple(net::use_awaitable);

struct Options {
  std::string host = "127.0.0.1", port = "5728", model, api_key;
  int64_t num_prompts = 0, input_len = 0, output_len = 0, max_concurrency = 0;
  double request_rate = 0.0;  // 0: all at once
  uint64_t seed = 0;
  bool json_output = false;
};

struct Outcome {
  bool ok = false;
  std::string error;
  double ttft_s = 0.0, e2e_s = 0.0;
  std::vector<double> itl_s;
  int64_t output_tokens = 0;
};

Args make_args() {
  Args a(
      "photon bench serve --url URL --num-prompts N --input-len I --output-len O [--request-rate R | "
      "--max-concurrency C] [--json]",
      "Serving benchmark over HTTP: streamed completions of random prompts against an OpenAI-compatible server "
      "(photon serve, vLLM, llama.cpp's server ...).");
  a.option("url", "URL", "the server, http://HOST:PORT", "http://127.0.0.1:5728");
  a.option("model", "NAME", "the model to request (default: the first of GET /v1/models)");
  a.option("api-key", "KEY", "sent as Authorization: Bearer KEY");
  a.option("num-prompts", "N", "requests to send");
  a.option("input-len", "I", "prompt tokens per request (random ids)");
  a.option("output-len", "O", "generated tokens per request (EOS ignored)");
  a.option("request-rate", "R", "requests per second, Poisson arrivals (default: all at once)");
  a.option("max-concurrency", "C", "requests in flight at most (default: no limit)");
  a.option("seed", "S", "seed of the prompts and arrival times", "0");
  a.flag("json", "print the results as one JSON object on the last stdout line");
  return a;
}

Status bad(std::string message) { return Status(StatusCode::kInvalidArgument, std::move(message)); }

Status read_options(const Args& a, Options& o) {
  std::string url = a.get("url");
  if (!url.starts_with("http://")) return bad("--url must be http://HOST:PORT");
  url = url.substr(7);
  if (const size_t slash = url.find('/'); slash != std::string::npos) url = url.substr(0, slash);
  const size_t colon = url.rfind(':');
  o.host = colon == std::string::npos ? url : url.substr(0, colon);
  o.port = colon == std::string::npos ? "80" : url.substr(colon + 1);
  if (o.host.empty()) return bad("--url names no host");
  o.model = a.get("model");
  o.api_key = a.get("api-key");
  for (const char* required : {"num-prompts", "input-len", "output-len"}) {
    if (!a.has(required)) return bad(fmt::format("--{} is required", required));
  }
  PHOTON_ASSIGN_OR_RETURN(o.num_prompts, a.get_int("num-prompts", 1, 1 << 20));
  PHOTON_ASSIGN_OR_RETURN(o.input_len, a.get_int("input-len", 1, 1 << 20));
  PHOTON_ASSIGN_OR_RETURN(o.output_len, a.get_int("output-len", 1, 1 << 20));
  if (a.has("request-rate")) {
    PHOTON_ASSIGN_OR_RETURN(o.request_rate, a.get_double("request-rate", 1e-6, 1e9));
  }
  if (a.has("max-concurrency")) {
    PHOTON_ASSIGN_OR_RETURN(o.max_concurrency, a.get_int("max-concurrency", 1, 1 << 20));
  }
  PHOTON_ASSIGN_OR_RETURN(const int64_t seed, a.get_int("seed", 0, INT64_MAX));
  o.seed = static_cast<uint64_t>(seed);
  o.json_output = a.has("json");
  return Status::ok();
}

http::request<http::string_body> make_request(const Options& o, http::verb verb, const std::string& target,
                                              std::string body) {
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, o.host);
  req.set(http::field::content_type, "application/json");
  if (!o.api_key.empty()) req.set(http::field::authorization, "Bearer " + o.api_key);
  req.keep_alive(false);
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

// One streamed request: the time of each event that carries text, until [DONE].
net::awaitable<void> run_one(const Options& o, tcp::endpoint endpoint, std::string body, Outcome& out) {
  beast::tcp_stream stream(co_await net::this_coro::executor);
  const auto t0 = Clock::now();
  auto [ec] = co_await stream.async_connect(endpoint, kAwait);
  if (ec) {
    out.error = "connect: " + ec.message();
    co_return;
  }
  auto req = make_request(o, http::verb::post, "/v1/completions", std::move(body));
  auto [wec, wn] = co_await http::async_write(stream, req, kAwait);
  if (wec) {
    out.error = "write: " + wec.message();
    co_return;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  auto [hec, hn] = co_await http::async_read_header(stream, buffer, parser, kAwait);
  if (hec || parser.get().result() != http::status::ok) {
    out.error = hec ? "read: " + hec.message() : fmt::format("HTTP {}", parser.get().result_int());
    co_return;
  }
  std::string pending;
  char chunk[16384];
  double last = -1.0;
  bool done = false;
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    auto [rec, rn] = co_await http::async_read_some(stream, buffer, parser, kAwait);
    if (rec == http::error::need_buffer) rec = {};
    if (rec) {
      out.error = "stream: " + rec.message();
      co_return;
    }
    pending.append(chunk, sizeof(chunk) - parser.get().body().size);
    for (size_t at; (at = pending.find("\n\n")) != std::string::npos;) {
      std::string event = pending.substr(0, at);
      pending.erase(0, at + 2);
      if (!event.starts_with("data: ")) continue;
      event.erase(0, 6);
      const double now = std::chrono::duration<double>(Clock::now() - t0).count();
      if (event == "[DONE]") {
        done = true;
        continue;
      }
      const json j = json::parse(event, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        out.error = j["error"].value("message", "error event");
        co_return;
      }
      if (j.contains("usage") && j["usage"].is_object()) out.output_tokens = j["usage"].value("completion_tokens", 0);
      if (!j.contains("choices") || j["choices"].empty()) continue;
      if (last < 0.0) {
        out.ttft_s = now;
      } else {
        out.itl_s.push_back(now - last);
      }
      last = now;
    }
  }
  out.e2e_s = std::chrono::duration<double>(Clock::now() - t0).count();
  out.ok = done;
  if (!done) out.error = "the stream ended without [DONE]";
}

Status run(const Options& o) {
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(o.host, o.port, ec);
  if (ec || endpoints.empty())
    return Status(StatusCode::kIoError, fmt::format("cannot resolve {}: {}", o.host, ec.message()));
  const tcp::endpoint endpoint = *endpoints.begin();
  Options opts = o;
  if (opts.model.empty()) {  // the server's first model
    beast::tcp_stream s(ioc);
    s.connect(endpoint, ec);
    if (ec)
      return Status(StatusCode::kIoError, fmt::format("cannot connect to {}:{}: {}", o.host, o.port, ec.message()));
    http::write(s, make_request(opts, http::verb::get, "/v1/models", ""), ec);
    beast::flat_buffer b;
    http::response<http::string_body> res;
    if (!ec) http::read(s, b, res, ec);
    const json models = ec ? json() : json::parse(res.body(), nullptr, false);
    if (ec || !models.is_object() || !models.contains("data") || models["data"].empty()) {
      return Status(StatusCode::kIoError, "GET /v1/models gave no model; pass --model");
    }
    opts.model = models["data"][0]["id"];
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(1000, 20000);
  std::exponential_distribution<double> gap(o.request_rate > 0 ? o.request_rate : 1.0);
  std::vector<Outcome> outcomes(static_cast<size_t>(o.num_prompts));
  std::vector<std::string> bodies;
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    std::vector<int32_t> ids(static_cast<size_t>(o.input_len));
    for (int32_t& id : ids) id = token(rng);
    bodies.push_back(json{{"model", opts.model},
                          {"prompt", ids},
                          {"max_tokens", o.output_len},
                          {"temperature", 0},
                          {"ignore_eos", true},
                          {"stream", true},
                          {"stream_options", {{"include_usage", true}}}}
                         .dump());
  }
  std::vector<double> arrivals(static_cast<size_t>(o.num_prompts), 0.0);
  for (size_t i = 1; i < arrivals.size() && o.request_rate > 0; ++i) arrivals[i] = arrivals[i - 1] + gap(rng);
  const auto start = Clock::now();
  // The driver: waits for each arrival time and a free slot, then starts the request.
  int64_t in_flight = 0;
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        net::steady_timer timer(co_await net::this_coro::executor);
        for (size_t i = 0; i < bodies.size(); ++i) {
          const auto due =
              start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i]));
          if (due > Clock::now()) {
            timer.expires_at(due);
            co_await timer.async_wait(kAwait);
          }
          while (o.max_concurrency > 0 && in_flight >= o.max_concurrency) {
            timer.expires_after(std::chrono::microseconds(200));
            co_await timer.async_wait(kAwait);
          }
          ++in_flight;
          net::co_spawn(
              ioc,
              [&, i]() -> net::awaitable<void> {
                co_await run_one(opts, endpoint, std::move(bodies[i]), outcomes[i]);
                --in_flight;
              },
              net::detached);
        }
      },
      net::detached);
  ioc.run();
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, tpot, itl, e2e;
  int64_t completed = 0, output_tokens = 0;
  std::string first_error;
  for (const Outcome& r : outcomes) {
    if (!r.ok) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++completed;
    output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s * 1e3);
    e2e.push_back(r.e2e_s * 1e3);
    if (r.output_tokens > 1) tpot.push_back((r.e2e_s - r.ttft_s) * 1e3 / static_cast<double>(r.output_tokens - 1));
    for (double x : r.itl_s) itl.push_back(x * 1e3);
  }
  const int64_t input_tokens = completed * o.input_len;
  json result = {{"num_prompts", o.num_prompts},
                 {"input_len", o.input_len},
                 {"output_len", o.output_len},
                 {"completed", completed},
                 {"failed", o.num_prompts - completed},
                 {"duration_s", duration},
                 {"request_throughput", static_cast<double>(completed) / duration},
                 {"input_tok_per_s", static_cast<double>(input_tokens) / duration},
                 {"output_tok_per_s", static_cast<double>(output_tokens) / duration},
                 {"total_tok_per_s", static_cast<double>(input_tokens + output_tokens) / duration},
                 {"ttft_ms", latency_summary(ttft, true)},
                 {"tpot_ms", latency_summary(tpot, true)},
                 {"itl_ms", latency_summary(itl, true)},
                 {"e2e_ms", latency_summary(e2e, true)}};
  fmt::print("requests          {} completed, {} failed in {:.2f} s{}\n", completed, o.num_prompts - completed,
             duration, first_error.empty() ? "" : " (first error: " + first_error + ")");
  fmt::print("throughput        {:.2f} req/s, {:.1f} input tok/s, {:.1f} output tok/s\n",
             result["request_throughput"].get<double>(), result["input_tok_per_s"].get<double>(),
             result["output_tok_per_s"].get<double>());
  for (const char* name : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    const json& s = result[name];
    if (s["p50"].is_null()) continue;
    fmt::print("{:<18}mean {:.2f}  p50 {:.2f}  p90 {:.2f}  p99 {:.2f}\n", name, s["mean"].get<double>(),
               s["p50"].get<double>(), s["p90"].get<double>(), s["p99"].get<double>());
  }
  if (o.json_output) fmt::print("{}\n", result.dump());
  if (completed == 0) return Status(StatusCode::kIoError, "no request completed: " + first_error);
  return Status::ok();
}

}  // namespace

int run_bench_serve(int argc, char** argv) {
  Args args = make_args();
  Options o;
  return run_command(
      args, argc, argv, 3, "photon bench serve", [&] { return read_options(args, o); }, [&] { return run(o); });
}

}  // namespace photon::cli
