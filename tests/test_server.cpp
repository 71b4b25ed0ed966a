// The HTTP server over real loopback sockets: a photon::server::Server on a free port, driven by a small Beast
// client. OpenAI request and response shapes, streaming, n copies, every error status, a client that goes away
// mid-stream, and the Prometheus metrics. The chat cases need the fetched Qwen3 tokenizer and skip without it.
#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <photon/engine.hpp>

#include "server/reasoning.hpp"
#include "server/server.hpp"
#include "server/tool_calls.hpp"

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;
using photon::server::Server;
using photon::server::ServerConfig;

namespace {

std::string tokenizer_cache() {
  if (const char* env = std::getenv("PHOTON_TOKENIZER_CACHE")) return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME")) return std::string(xdg) + "/photon/tokenizers";
  if (const char* home = std::getenv("HOME")) return std::string(home) + "/.cache/photon/tokenizers";
  return {};
}

struct Reply {
  int status = 0;
  std::string body;
  std::string content_type;
};

// One request on a fresh connection.
Reply request(uint16_t port, http::verb method, const std::string& target, const std::string& body = "",
              const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  http::read(stream, buffer, parser);
  Reply r;
  r.status = static_cast<int>(parser.get().result_int());
  r.body = parser.get().body();
  r.content_type = std::string(parser.get()[http::field::content_type]);
  return r;
}

Reply post(uint16_t port, const std::string& target, const json& body,
           const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  return request(port, http::verb::post, target, body.dump(), headers);
}

// The data payloads of a server-sent-event body, in order.
std::vector<std::string> events(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

// A metric's value from /metrics (the first line that starts with `name`).
double metric(uint16_t port, const std::string& name) {
  const Reply r = request(port, http::verb::get, "/metrics");
  size_t at = r.body.find("\n" + name + " ");
  if (at == std::string::npos) at = r.body.find("\n" + name + "{");
  if (at == std::string::npos) return -1.0;
  const size_t space = r.body.find(' ', at + 1);
  return std::stod(r.body.substr(space + 1, r.body.find('\n', space) - space - 1));
}

// Connects and sends `body` as POST /v1/completions on `stream`.
void send_completion(beast::tcp_stream& stream, uint16_t port, const json& body) {
  stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
  req.set(http::field::host, "127.0.0.1");
  req.body() = body.dump();
  req.prepare_payload();
  http::write(stream, req);
}

// Sends `body` (a streamed completion), reads the response header — and with `read_event` the first bytes of the
// stream — then hangs up. Returns the HTTP status. Safe to call from several threads.
int stream_then_hang_up(uint16_t port, const json& body, bool read_event) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  send_completion(stream, port, body);
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  http::read_header(stream, buffer, parser);
  if (read_event) {
    char data[256];
    parser.get().body().data = data;
    parser.get().body().size = sizeof(data);
    beast::error_code ec;
    http::read_some(stream, buffer, parser, ec);
  }
  stream.close();
  return static_cast<int>(parser.get().result_int());
}

// Sends `body` (a completion that is not streamed) and hangs up without reading the answer.
void send_then_hang_up(uint16_t port, const json& body) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  send_completion(stream, port, body);
  stream.close();
}

// Waits up to 10 s until the server runs and queues no request and its KV cache is empty; whether it got there.
bool wait_idle(uint16_t port) {
  for (int i = 0; i < 400; ++i) {
    if (metric(port, "photon_num_requests_running") == 0 && metric(port, "photon_num_requests_waiting") == 0 &&
        metric(port, "photon_kv_cache_usage_perc") == 0) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

photon::EngineConfig tiny(const std::string& model, const std::string& tokenizer = "") {
  photon::EngineConfig c;
  c.model = model;
  c.tokenizer = tokenizer;
  c.device = "cpu";
  c.max_model_len = 128;
  c.num_kv_blocks = 64;
  c.block_size = 8;
  c.max_num_seqs = 16;
  return c;
}

std::unique_ptr<Server> start(const photon::EngineConfig& engine, ServerConfig config = {}) {
  config.port = 0;
  auto server = Server::create(config);
  REQUIRE(server.is_ok());
  auto e = photon::Engine::create(engine);
  REQUIRE(e.is_ok());
  REQUIRE((*server)->set_engine(std::move(*e)).is_ok());
  return std::move(*server);
}

}  // namespace

TEST_CASE("the server answers health 503 while loading, then completions of token-id prompts") {
  ServerConfig config;
  config.port = 0;
  config.served_model_name = "tiny";
  auto created = Server::create(config);
  REQUIRE(created.is_ok());
  Server& server = **created;
  const uint16_t port = server.port();
  CHECK(request(port, http::verb::get, "/health").status == 503);
  CHECK(post(port, "/v1/completions", {{"prompt", {1, 2, 3}}}).status == 503);
  auto engine = photon::Engine::create(tiny("dummy:tiny-llama3"));
  REQUIRE(engine.is_ok());
  REQUIRE(server.set_engine(std::move(*engine)).is_ok());
  CHECK(request(port, http::verb::get, "/health").status == 200);

  const json models = json::parse(request(port, http::verb::get, "/v1/models").body);
  CHECK(models["data"][0]["id"] == "tiny");
  CHECK(models["data"][0]["max_model_len"] == 128);

  // Greedy, whole: 6 tokens, usage counted; the same request streamed gives the same tokens' finish and usage.
  const json req = {{"model", "tiny"},  {"prompt", {5, 6, 7, 8}}, {"max_tokens", 6},
                    {"temperature", 0}, {"ignore_eos", true},     {"logprobs", 2}};
  const Reply whole = post(port, "/v1/completions", req);
  REQUIRE(whole.status == 200);
  CHECK(whole.content_type == "application/json");
  const json w = json::parse(whole.body);
  CHECK(w["object"] == "text_completion");
  CHECK(w["model"] == "tiny");
  CHECK(w["choices"][0]["finish_reason"] == "length");
  CHECK(w["usage"]["prompt_tokens"] == 4);
  CHECK(w["usage"]["completion_tokens"] == 6);
  CHECK(w["usage"]["total_tokens"] == 10);
  REQUIRE(w["choices"][0]["logprobs"]["token_logprobs"].size() == 6);
  for (const json& lp : w["choices"][0]["logprobs"]["token_logprobs"]) CHECK(lp.get<double>() <= 0.0);
  CHECK(w["choices"][0]["logprobs"]["top_logprobs"][0].size() == 2);

  json stream_req = req;
  stream_req["stream"] = true;
  stream_req["stream_options"] = {{"include_usage", true}};
  const Reply streamed = post(port, "/v1/completions", stream_req);
  REQUIRE(streamed.status == 200);
  CHECK(streamed.content_type == "text/event-stream");
  const auto ev = events(streamed.body);
  REQUIRE(ev.size() >= 3);
  CHECK(ev.back() == "[DONE]");
  const json usage = json::parse(ev[ev.size() - 2]);
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["completion_tokens"] == 6);
  std::vector<double> streamed_lps;
  std::string finish;
  for (size_t i = 0; i + 2 < ev.size(); ++i) {
    const json c = json::parse(ev[i]);
    CHECK(c["usage"].is_null());
    for (const json& lp : c["choices"][0]["logprobs"]["token_logprobs"]) streamed_lps.push_back(lp.get<double>());
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  CHECK(finish == "length");
  REQUIRE(streamed_lps.size() == 6);
  for (size_t i = 0; i < 6; ++i)
    CHECK(streamed_lps[i] == w["choices"][0]["logprobs"]["token_logprobs"][i].get<double>());

  // A logit bias of 100 makes greedy decoding choose token 7 every time; its logprobs stay the model's own.
  json bias_req = req;
  bias_req["logit_bias"] = {{"7", 100}, {"8", -100}};
  const json biased = json::parse(post(port, "/v1/completions", bias_req).body);
  REQUIRE(biased["choices"][0]["logprobs"]["tokens"].size() == 6);
  for (size_t i = 0; i < 6; ++i) {
    CHECK(biased["choices"][0]["logprobs"]["tokens"][i] == "token_id:7");
    CHECK(biased["choices"][0]["logprobs"]["token_logprobs"][i].get<double>() < -0.01);
  }

  // n copies with a seed: n choices, each reproducible, counted together.
  const json n_req = {{"prompt", {9, 10}}, {"max_tokens", 5},    {"n", 3},
                      {"seed", 11},        {"temperature", 1.0}, {"ignore_eos", true}};
  const json a = json::parse(post(port, "/v1/completions", n_req).body);
  const json b = json::parse(post(port, "/v1/completions", n_req).body);
  REQUIRE(a["choices"].size() == 3);
  CHECK(a["usage"]["completion_tokens"] == 15);
  for (int i = 0; i < 3; ++i) {
    CHECK(a["choices"][i]["index"] == i);
    CHECK(a["choices"][i]["text"] == b["choices"][i]["text"]);
  }
  server.shutdown(1.0);
  server.shutdown(1.0);  // idempotent
}

TEST_CASE("every bad request gets an OpenAI error body and the server keeps serving") {
  ServerConfig config;
  config.api_key = "sekret";
  config.max_queue = 2;
  config.max_body_bytes = 4096;
  auto server = start(tiny("dummy:tiny-llama3"), config);
  const uint16_t port = server->port();
  const std::vector<std::pair<std::string, std::string>> key = {{"Authorization", "Bearer sekret"}};
  const auto error_of = [](const Reply& r) {
    const json j = json::parse(r.body);
    REQUIRE(j.contains("error"));
    CHECK(j["error"].contains("message"));
    CHECK(j["error"].contains("type"));
    CHECK(j["error"].contains("param"));
    CHECK(j["error"].contains("code"));
    return j["error"];
  };
  // Authentication: missing, wrong, right; /health needs none.
  CHECK(post(port, "/v1/completions", {{"prompt", {1}}}).status == 401);
  CHECK(error_of(post(port, "/v1/completions", {{"prompt", {1}}}, {{"Authorization", "Bearer sekreT"}}))["code"] ==
        "invalid_api_key");
  CHECK(post(port, "/v1/completions", {{"prompt", {1}}, {"max_tokens", 2}}, key).status == 200);
  CHECK(request(port, http::verb::get, "/health").status == 200);

  struct Case {
    std::string what, target, body;
    int status;
    std::string param;
  };
  const std::vector<Case> cases = {
      {"invalid JSON", "/v1/completions", "{\"prompt\": [1,", 400, ""},
      {"not an object", "/v1/completions", "[1, 2]", 400, ""},
      {"missing prompt", "/v1/completions", R"({"max_tokens": 3})", 400, "prompt"},
      {"prompt of the wrong type", "/v1/completions", R"({"prompt": 7})", 400, "prompt"},
      {"max_tokens of the wrong type", "/v1/completions", R"({"prompt": [1], "max_tokens": "3"})", 400, "max_tokens"},
      {"temperature out of range", "/v1/completions", R"({"prompt": [1], "temperature": -1})", 400, "temperature"},
      {"n out of range", "/v1/completions", R"({"prompt": [1], "n": 17})", 400, "n"},
      {"stop of the wrong type", "/v1/completions", R"({"prompt": [1], "stop": 5})", 400, "stop"},
      {"logit_bias not an object", "/v1/completions", R"({"prompt": [1], "logit_bias": [5]})", 400, "logit_bias"},
      {"logit_bias key not an id", "/v1/completions", R"({"prompt": [1], "logit_bias": {"x1": 5}})", 400, "logit_bias"},
      {"logit_bias out of range", "/v1/completions", R"({"prompt": [1], "logit_bias": {"1": 101}})", 400, "logit_bias"},
      {"logit_bias id outside the vocabulary", "/v1/completions", R"({"prompt": [1], "logit_bias": {"99999999": 1}})",
       400, ""},
      {"a JSON response format", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}})", 400,
       "response_format"},
      {"token id outside the vocabulary", "/v1/completions", R"({"prompt": [1, 999999999]})", 400, ""},
      {"text prompt without a tokenizer", "/v1/completions", R"({"prompt": "hi"})", 400, "prompt"},
      {"missing messages", "/v1/chat/completions", R"({"model": "x"})", 400, "messages"},
      {"unknown role", "/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "hi"}]})", 400,
       "messages"},
      {"unknown model", "/v1/completions", R"({"prompt": [1], "model": "gpt-9"})", 404, "model"},
      {"prompt plus max_tokens beyond max_model_len", "/v1/completions", R"({"prompt": [1, 2], "max_tokens": 127})",
       400, "max_tokens"},
      {"a full queue", "/v1/completions", R"({"prompt": [1], "n": 3})", 429, ""},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const Reply r = request(port, http::verb::post, c.target, c.body, key);
    CHECK(r.status == c.status);
    const json e = error_of(r);
    if (!c.param.empty()) CHECK(e["param"] == c.param);
  }
  // The context error names both numbers.
  const std::string long_msg = error_of(
      request(port, http::verb::post, "/v1/completions", R"({"prompt": [1, 2], "max_tokens": 127})", key))["message"];
  CHECK(long_msg.find("127") != std::string::npos);
  CHECK(long_msg.find("128") != std::string::npos);
  // A body over the limit, an unknown route, a wrong method.
  CHECK(request(port, http::verb::post, "/v1/completions", std::string(5000, ' '), key).status == 413);
  CHECK(request(port, http::verb::get, "/v1/nothing", "", key).status == 404);
  CHECK(request(port, http::verb::get, "/v1/completions", "", key).status == 405);
  CHECK(request(port, http::verb::post, "/health").status == 405);
  // Still serving, and the rejections are counted.
  CHECK(post(port, "/v1/completions", {{"prompt", {3, 4}}, {"max_tokens", 2}}, key).status == 200);
  CHECK(metric(port, "photon_request_rejected_total") > 0);
  server->shutdown(1.0);
}

TEST_CASE("a client that goes away mid-stream cancels its request and frees its KV blocks") {
  // Requests far longer than the hang-ups take: a short one can be generated whole into the socket's buffer before the
  // client closes it, and then rightly finishes by length.
  photon::EngineConfig engine = tiny("dummy:tiny-llama3");
  engine.max_model_len = 4096;
  engine.num_kv_blocks = 1100;
  auto server = start(engine);
  const uint16_t port = server->port();
  const json body = {{"prompt", {1, 2, 3}}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}};
  for (int round = 0; round < 3; ++round) CHECK(stream_then_hang_up(port, body, /*read_event=*/true) == 200);
  // Every request ends (cancelled at the next step) and the KV cache is empty again.
  CHECK(wait_idle(port));
  CHECK(metric(port, "photon_request_success_total{finished_reason=\"cancelled\"}") == 3);
  // The same for a response that is not streamed: nothing is written until the end, yet the hang-up is seen.
  json whole = body;
  whole["stream"] = false;
  for (int round = 0; round < 2; ++round) send_then_hang_up(port, whole);
  const auto finished = [&](const char* reason) {
    return metric(port, fmt::format("photon_request_success_total{{finished_reason=\"{}\"}}", reason));
  };
  for (int i = 0; i < 400 && finished("cancelled") + finished("length") < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  CHECK(finished("cancelled") == 5);  // not run to its length
  CHECK(wait_idle(port));
  // A whole request still works.
  CHECK(post(port, "/v1/completions", {{"prompt", {1}}, {"max_tokens", 3}}).status == 200);
  server->shutdown(1.0);
}

TEST_CASE("chat completions render the model's template, stream deltas and tokenize") {
  const std::string qwen = tokenizer_cache() + "/qwen3";
  if (!std::filesystem::exists(qwen + "/tokenizer.json")) SKIP("run scripts/fetch-tokenizers.sh");
  auto server = start(tiny("dummy:tiny-qwen3", qwen));
  const uint16_t port = server->port();
  const json chat = {
      {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}},
      {"max_tokens", 5},
      {"temperature", 0},
      {"ignore_eos", true},
      {"logprobs", true},
      {"top_logprobs", 1},
      {"chat_template_kwargs", {{"enable_thinking", false}}}};
  const Reply whole = post(port, "/v1/chat/completions", chat);
  REQUIRE(whole.status == 200);
  const json w = json::parse(whole.body);
  CHECK(w["object"] == "chat.completion");
  CHECK(w["choices"][0]["message"]["role"] == "assistant");
  CHECK(w["choices"][0]["finish_reason"] == "length");
  CHECK(w["choices"][0]["logprobs"]["content"].size() == 5);
  // The prompt is the template's rendering: tokenize it the same way and compare the count.
  const json rendered_count =
      json::parse(post(port, "/tokenize",
                       {{"prompt",
                         "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>"
                         "\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
                        {"add_special_tokens", false}})
                      .body);
  CHECK(w["usage"]["prompt_tokens"] == rendered_count["count"]);

  json stream_req = chat;
  stream_req["stream"] = true;
  const auto ev = events(post(port, "/v1/chat/completions", stream_req).body);
  REQUIRE(ev.size() >= 3);
  CHECK(ev.back() == "[DONE]");
  const json first = json::parse(ev[0]);
  CHECK(first["object"] == "chat.completion.chunk");
  CHECK(first["choices"][0]["delta"]["role"] == "assistant");
  std::string text;
  for (size_t i = 1; i + 1 < ev.size(); ++i) {
    const json d = json::parse(ev[i])["choices"][0]["delta"];
    if (d.contains("content")) text += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) text += d["reasoning_content"].get<std::string>();
  }
  const std::string whole_text = w["choices"][0]["message"]["content"].get<std::string>() +
                                 w["choices"][0]["message"].value("reasoning_content", std::string());
  CHECK(text.size() == whole_text.size());

  // A stop string ends the reply before it, whole and streamed, with finish_reason "stop".
  const json plain = json::parse(
      post(port, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}})
          .body);
  const std::string full = plain["choices"][0]["text"];
  REQUIRE(full.size() > 8);
  // One whole character from the middle of the text (UTF-8: step back to a lead byte, take its continuation bytes).
  const auto continuation = [&](size_t i) { return (static_cast<unsigned char>(full[i]) & 0xc0) == 0x80; };
  size_t begin = full.size() / 2;
  while (begin > 0 && continuation(begin)) --begin;
  size_t end = begin + 1;
  while (end < full.size() && continuation(end)) ++end;
  const std::string stop = full.substr(begin, end - begin);
  const json stopped = json::parse(
      post(port, "/v1/completions",
           {{"prompt", "Hello"}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}, {"stop", {stop}}})
          .body);
  const std::string cut = stopped["choices"][0]["text"];
  CHECK(stopped["choices"][0]["finish_reason"] == "stop");
  CHECK(full.starts_with(cut));
  CHECK(cut.find(stop) == std::string::npos);
  CHECK(full.find(stop) == cut.size());

  // Tokenize / detokenize round trip.
  const json ids = json::parse(post(port, "/tokenize", {{"prompt", "Hello world"}}).body);
  CHECK(ids["tokens"] == json({9707, 1879}));
  CHECK(json::parse(post(port, "/detokenize", {{"tokens", ids["tokens"]}}).body)["prompt"] == "Hello world");
  CHECK(post(port, "/detokenize", {{"tokens", {-1}}}).status == 400);
  server->shutdown(1.0);
}

TEST_CASE("reasoning is split from content across arbitrary text pieces") {
  photon::server::ReasoningSplitter s;
  std::string reasoning, content;
  for (const char* piece : {"<thi", "nk>\nLet me", " think.</th", "ink>\n\nThe answer", " is 4."}) {
    const auto d = s.feed(piece);
    reasoning += d.reasoning;
    content += d.content;
  }
  const auto d = s.finish();
  reasoning += d.reasoning;
  content += d.content;
  CHECK(reasoning == "Let me think.");
  CHECK(content == "The answer is 4.");
  // Text that only looks like the start of a tag is released once it cannot be one.
  photon::server::ReasoningSplitter plain;
  CHECK(plain.feed("a <t").content == "a ");
  CHECK(plain.feed("able>").content == "<table>");
}

TEST_CASE("tool calls are parsed out of Hermes tags and Llama 3 JSON, streamed in pieces") {
  using photon::server::ToolCallFormat;
  using photon::server::ToolCallParser;
  const auto run = [](ToolCallFormat format, const std::vector<std::string>& pieces) {
    ToolCallParser p(format);
    ToolCallParser::Delta all;
    for (const std::string& piece : pieces) {
      auto d = p.feed(piece);
      all.content += d.content;
      for (auto& c : d.calls) all.calls.push_back(c);
    }
    auto d = p.finish();
    all.content += d.content;
    for (auto& c : d.calls) all.calls.push_back(c);
    return std::make_pair(all, p.found_calls());
  };
  // Qwen3 / Hermes: text, then a call split across pieces, then another call.
  auto [h, found] = run(ToolCallFormat::kHermes,
                        {"Let me check.\n<tool", "_call>\n{\"name\": \"get_weather\", \"argu",
                         "ments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\":\"now\"}</tool_call>"});
  CHECK(found);
  CHECK(h.content == "Let me check.\n\n");
  REQUIRE(h.calls.size() == 2);
  CHECK(h.calls[0].name == "get_weather");
  CHECK(json::parse(h.calls[0].arguments) == json({{"city", "Paris"}}));
  CHECK(h.calls[0].id.starts_with("call_"));
  CHECK(h.calls[0].id != h.calls[1].id);
  CHECK(h.calls[1].arguments == "{}");
  // Not a valid call: it stays text, tags included; an unterminated call too.
  auto [bad, bad_found] = run(ToolCallFormat::kHermes, {"a <tool_call>{not json}</tool_call> b <tool_call>{\"na"});
  CHECK_FALSE(bad_found);
  CHECK(bad.content == "a <tool_call>{not json}</tool_call> b <tool_call>{\"na");
  CHECK(bad.calls.empty());
  // Llama 3: the whole answer is the call (python tag optional), or several separated by ';'.
  auto [l, l_found] =
      run(ToolCallFormat::kLlamaJson, {"<|python", "_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"a;b\"}}"});
  CHECK(l_found);
  REQUIRE(l.calls.size() == 1);
  CHECK(l.calls[0].name == "search");
  CHECK(json::parse(l.calls[0].arguments)["q"] == "a;b");
  auto [two, two_found] =
      run(ToolCallFormat::kLlamaJson, {"{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {}}"});
  CHECK(two.calls.size() == 2);
  // Plain text streams through at once; JSON that is not a call stays content.
  ToolCallParser text(ToolCallFormat::kLlamaJson);
  CHECK(text.feed("The answer").content == "The answer");

  // A forced call (tool_choice required or named): the prompt ends with the call's opening, the parser reads it first.
  for (const ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kLlamaJson}) {
    ToolCallParser named(format);
    const ToolCallParser::Delta opened = named.feed(call_opening(format, "get_weather"));
    CHECK(opened.content.empty());
    const std::string rest =
        format == ToolCallFormat::kHermes ? "{\"city\": \"Paris\"}}\n</tool_call>" : "{\"city\": \"Paris\"}}";
    ToolCallParser::Delta d = named.feed(rest);
    ToolCallParser::Delta end = named.finish();
    d.calls.insert(d.calls.end(), end.calls.begin(), end.calls.end());
    REQUIRE(d.calls.size() == 1);
    CHECK(d.calls[0].name == "get_weather");
    CHECK(json::parse(d.calls[0].arguments) == json{{"city", "Paris"}});
    CHECK(d.content + end.content == "");
    ToolCallParser any(format);
    (void)any.feed(call_opening(format, ""));
    // Hermes leaves the whole object to the model; Llama's opening already holds `{"name": "`.
    d = any.feed(format == ToolCallFormat::kHermes ? "{\"name\": \"now\", \"arguments\": {}}</tool_call>"
                                                   : "now\", \"parameters\": {}}");
    end = any.finish();
    d.calls.insert(d.calls.end(), end.calls.begin(), end.calls.end());
    REQUIRE(d.calls.size() == 1);
    CHECK(d.calls[0].name == "now");
  }
  auto [notcall, nc_found] = run(ToolCallFormat::kLlamaJson, {"{\"answer\": 42}"});
  CHECK_FALSE(nc_found);
  CHECK(notcall.content == "{\"answer\": 42}");
}

TEST_CASE("tools and tool results reach the chat template") {
  const std::string qwen = tokenizer_cache() + "/qwen3";
  if (!std::filesystem::exists(qwen + "/tokenizer.json")) SKIP("run scripts/fetch-tokenizers.sh");
  photon::EngineConfig config = tiny("dummy:tiny-qwen3", qwen);
  config.max_model_len = 512;
  config.num_kv_blocks = 128;
  auto server = start(config);
  const uint16_t port = server->port();
  const json tools = {{{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"description", "Weather of a city"},
                         {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}};
  json messages = {{{"role", "user"}, {"content", "Weather in Paris?"}}};
  const auto prompt_tokens = [&](const json& body) {
    const Reply r = post(port, "/v1/chat/completions", body);
    INFO(r.body);
    REQUIRE(r.status == 200);
    return json::parse(r.body)["usage"]["prompt_tokens"].get<int>();
  };
  const int plain = prompt_tokens({{"messages", messages}, {"max_tokens", 1}});
  const int with_tools = prompt_tokens({{"messages", messages}, {"tools", tools}, {"max_tokens", 1}});
  const int none =
      prompt_tokens({{"messages", messages}, {"tools", tools}, {"tool_choice", "none"}, {"max_tokens", 1}});
  CHECK(with_tools > plain + 20);  // the tool schema is in the prompt
  CHECK(none == plain);
  // A forced call: the answer starts with the call's opening, which is in the prompt.
  const int required =
      prompt_tokens({{"messages", messages}, {"tools", tools}, {"tool_choice", "required"}, {"max_tokens", 1}});
  const json named_choice = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const int named =
      prompt_tokens({{"messages", messages}, {"tools", tools}, {"tool_choice", named_choice}, {"max_tokens", 1}});
  CHECK(required == with_tools + 2);  // "<tool_call>" "\n"
  CHECK(named > required + 5);        // and the function's name
  const json unknown = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  const Reply bad_name = post(port, "/v1/chat/completions",
                              {{"messages", messages}, {"tools", tools}, {"tool_choice", unknown}, {"max_tokens", 1}});
  CHECK(bad_name.status == 400);
  CHECK(bad_name.body.find("get_time") != std::string::npos);
  CHECK(post(port, "/v1/chat/completions", {{"messages", messages}, {"tool_choice", "required"}}).status == 400);
  // A finished round: the assistant's call (arguments as JSON text, as clients send them) and the tool's result.
  messages.push_back({{"role", "assistant"},
                      {"content", nullptr},
                      {"tool_calls",
                       {{{"id", "call_1"},
                         {"type", "function"},
                         {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}});
  messages.push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C, sunny"}});
  const int round = prompt_tokens({{"messages", messages}, {"tools", tools}, {"max_tokens", 1}});
  CHECK(round > with_tools + 10);
  CHECK(post(port, "/v1/chat/completions", {{"messages", messages}, {"tools", {{{"type", "function"}}}}}).status ==
        400);
  CHECK(post(port, "/v1/chat/completions", {{"messages", messages}, {"tool_choice", "sometimes"}}).status == 400);
  server->shutdown(1.0);
}

// Resident memory of this process, in bytes.
size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST_CASE("load: 64 concurrent clients streaming, waiting, cancelling and hanging up, round after round") {
  photon::EngineConfig config = tiny("dummy:tiny-llama3");
  config.num_kv_blocks = 128;
  config.max_num_seqs = 32;
  ServerConfig sc;
  sc.io_threads = 3;
  auto server = start(config, sc);
  const uint16_t port = server->port();
  constexpr int kClients = 64, kPerClient = 3, kRounds = 3;
  std::vector<size_t> rss;
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<int> ok{0}, hung_up{0}, failed{0};
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        for (int r = 0; r < kPerClient; ++r) {
          const int kind = (c + r + round) % 4;  // 0 whole, 1 streamed, 2 hang up after the header, 3 after an event
          const json body = {{"prompt", {1 + c, 2 + r, 3 + round}},
                             {"max_tokens", 3 + (c + r) % 6},
                             {"ignore_eos", true},
                             {"stream", kind != 0},
                             {"seed", c * 100 + r}};
          try {
            if (kind >= 2) {
              (stream_then_hang_up(port, body, /*read_event=*/kind == 3) == 200 ? hung_up : failed)++;
              continue;
            }
            const Reply reply = post(port, "/v1/completions", body);
            const bool good = reply.status == 200 &&
                              (kind == 0 ? json::parse(reply.body)["usage"]["completion_tokens"] == 3 + (c + r) % 6
                                         : events(reply.body).back() == "[DONE]");
            (good ? ok : failed)++;
          } catch (const std::exception&) {
            failed++;
          }
        }
      });
    }
    for (std::thread& t : clients) t.join();
    INFO("round " << round);
    CHECK(failed == 0);
    CHECK(ok + hung_up == kClients * kPerClient);
    CHECK(wait_idle(port));  // every request ended and its KV blocks are free
    rss.push_back(resident_bytes());
  }
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // their allocators keep freed memory
  // Memory stays flat across rounds (the first round warms the allocator and the server's buffers).
  CHECK(static_cast<double>(rss.back()) <= 1.10 * static_cast<double>(rss[1]));
#endif
  server->shutdown(2.0);
}
