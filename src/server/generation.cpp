// POST /v1/chat/completions and /v1/completions: render and tokenize the prompt, submit n copies, then stream the
// engine's events as OpenAI chunks or gather them into one response.
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <unordered_map>

#include <sys/socket.h>

#include <fmt/format.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <nlohmann/json.hpp>
#include <photon/chat_template.hpp>
#include <photon/tokenizer.hpp>

#include "server/context.hpp"
#include "server/reasoning.hpp"
#include "server/tool_calls.hpp"

namespace photon::server {
namespace {

using Json = nlohmann::ordered_json;

// Compact JSON; bytes that are not UTF-8 (a lone token of a multi-byte character) become U+FFFD instead of failing.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The text of one token as OpenAI's logprobs report it (decoded alone).
std::string token_text(const Tokenizer* tok, int32_t id) {
  if (tok == nullptr) return fmt::format("token_id:{}", id);
  auto text = tok->decode(std::span<const int32_t>(&id, 1));
  return text ? *text : std::string();
}

Json utf8_bytes(const std::string& s) {
  Json bytes = Json::array();
  for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// Chat logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
Json chat_logprobs(const Tokenizer* tok, std::span<const TokenLogprob> records) {
  Json content = Json::array();
  for (const TokenLogprob& r : records) {
    const std::string t = token_text(tok, r.token);
    Json top = Json::array();
    for (const auto& [id, lp] : r.top) {
      const std::string s = token_text(tok, id);
      top.push_back({{"token", s}, {"logprob", lp}, {"bytes", utf8_bytes(s)}});
    }
    content.push_back({{"token", t}, {"logprob", r.logprob}, {"bytes", utf8_bytes(t)}, {"top_logprobs", top}});
  }
  return Json{{"content", content}};
}

// Completion logprobs: parallel lists of tokens, their logprobs, the top alternatives and text offsets. `first_null`:
// the first record is the prompt's first token, which has no logprob.
void completion_logprobs(const Tokenizer* tok, std::span<const TokenLogprob> records, size_t text_offset,
                         bool first_null, Json& out) {
  if (out.is_null()) {
    out = {{"tokens", Json::array()},
           {"token_logprobs", Json::array()},
           {"top_logprobs", Json::array()},
           {"text_offset", Json::array()}};
  }
  for (size_t i = 0; i < records.size(); ++i) {
    const TokenLogprob& r = records[i];
    const std::string t = token_text(tok, r.token);
    out["tokens"].push_back(t);
    out["text_offset"].push_back(text_offset);
    text_offset += t.size();
    if (first_null && i == 0) {
      out["token_logprobs"].push_back(nullptr);
      out["top_logprobs"].push_back(nullptr);
      continue;
    }
    out["token_logprobs"].push_back(r.logprob);
    Json top = Json::object();
    for (const auto& [id, lp] : r.top) top[token_text(tok, id)] = lp;
    out["top_logprobs"].push_back(top);
  }
}

// One of the n choices of a request.
struct Choice {
  uint64_t id = 0;
  bool finished = false;
  RequestEvent last;  // the finishing event (counts, reason, error)
  std::string content, reasoning;
  ReasoningSplitter splitter;
  std::vector<TokenLogprob> logprobs;
  Json completion_logprobs;             // completions only
  std::optional<ToolCallParser> tools;  // chat with tools: calls parsed out of the content
  std::vector<ToolCall> calls;
  size_t text_bytes = 0;         // completions: offset of the next token's text
  bool prompt_reported = false;  // echo with logprobs: the prompt's first token went out
  size_t prompt_bytes = 0;       // offset of the next prompt token's text
  double last_token_at = 0.0;
};

// Which call syntax the model writes: Hermes tags when its tokenizer has them (Qwen3), Llama 3's JSON otherwise.
ToolCallFormat call_format(const Engine& engine) {
  const Tokenizer* tok = engine.tokenizer();
  if (tok != nullptr && tok->token_to_id("<tool_call>")) return ToolCallFormat::kHermes;
  if (engine.model_info().architecture.starts_with("Llama")) return ToolCallFormat::kLlamaJson;
  return ToolCallFormat::kHermes;
}

// The opening of the call that tool_choice "required" or a named function makes the answer begin with; empty for
// auto and none.
std::string forced_call_prefix(const GenerationRequest& g, ToolCallFormat format) {
  if (!g.tools.is_array()) return {};
  if (g.tool_choice == "required") return call_opening(format, "");
  if (g.tool_choice.starts_with("function:"))
    return call_opening(format, g.tool_choice.substr(std::strlen("function:")));
  return {};
}

// The prompt as token ids, the text to echo (completions) and the output budget; or why not.
struct Prompt {
  std::vector<int32_t> ids;
  std::string echo_text;
  std::string forced_call;  // chat with tool_choice required or named: the start of the call, already in the prompt
};

std::variant<Prompt, ApiError> build_prompt(const Engine& engine, GenerationRequest& g) {
  const Tokenizer* tok = engine.tokenizer();
  Prompt p;
  if (g.endpoint == Endpoint::kChat) {
    const ChatTemplate* tmpl = engine.chat_template();
    if (tmpl == nullptr || tok == nullptr) {
      return ApiError::bad_request(
          "this model has no chat template (tokenizer_config.json with a chat_template); use /v1/completions or "
          "start the server with --chat-template FILE");
    }
    ChatTemplate::Options options;
    options.add_generation_prompt = true;
    if (g.chat_template_kwargs.is_object()) options.extra_json = dump(g.chat_template_kwargs);
    const bool with_tools = g.tools.is_array() && g.tool_choice != "none";
    auto text = tmpl->render(dump(g.messages), with_tools ? dump(g.tools) : "", options);
    if (!text)
      return ApiError::bad_request("the chat template could not render these messages: " + text.status().message(),
                                   "messages");
    p.forced_call = forced_call_prefix(g, call_format(engine));
    p.ids = tok->encode(*text + p.forced_call, /*add_special_tokens=*/false);
  } else if (g.prompt_is_ids) {
    p.ids = g.prompt_ids;
    if (g.echo && tok != nullptr) {
      auto text = tok->decode(p.ids);
      if (text) p.echo_text = *text;
    }
  } else {
    if (tok == nullptr) {
      return ApiError::bad_request("this model has no tokenizer; send the prompt as a list of token ids", "prompt");
    }
    p.ids = tok->encode(g.prompt_text, /*add_special_tokens=*/true);
    p.echo_text = g.prompt_text;
  }
  const int64_t max_len = engine.model_info().max_model_len;
  const auto n = static_cast<int64_t>(p.ids.size());
  if (!g.max_tokens_given) {
    if (n >= max_len) {
      return ApiError::bad_request(
          fmt::format("the prompt is {} tokens, which leaves no room for output within max_model_len {}", n, max_len),
          g.endpoint == Endpoint::kChat ? "messages" : "prompt");
    }
    g.params.max_tokens = static_cast<int32_t>(max_len - n);
  } else if (n + g.params.max_tokens > max_len) {
    ApiError e = ApiError::bad_request(
        fmt::format("this request's prompt ({} tokens) plus max_tokens ({}) is {} tokens, more than the model's "
                    "max_model_len of {}; shorten the prompt or lower max_tokens",
                    n, g.params.max_tokens, n + g.params.max_tokens, max_len),
        "max_tokens");
    e.code = "context_length_exceeded";
    return e;
  }
  return p;
}

Json usage_json(const std::vector<Choice>& choices) {
  int64_t completion = 0;
  for (const Choice& c : choices) completion += c.last.num_output_tokens;
  const int64_t prompt = choices.front().last.num_prompt_tokens;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", choices.front().last.num_cached_prompt_tokens}}}};
}

// Whether s is well-formed UTF-8.
bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// Appends s as a JSON string, quotes included (as nlohmann's dump writes it; bytes that are not UTF-8 become U+FFFD).
void append_json_string(std::string& out, std::string_view s) {
  if (!valid_utf8(s)) {
    out += dump(Json(std::string(s)));
    return;
  }
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// The streamed chunks of one response, formatted straight into a reused string: the fixed part (id, object,
// created, model) once, then each choice's fields (the hot path of streaming: one event per token per stream).
class ChunkWriter {
 public:
  ChunkWriter(const std::string& id, bool chat, int64_t created, const std::string& model, bool include_usage)
      : suffix_(include_usage ? "],\"usage\":null}" : "]}") {
    prefix_ = dump(Json{{"id", id},
                        {"object", chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", created},
                        {"model", model}});
    prefix_.pop_back();  // the closing brace
    prefix_ += ",\"choices\":[";
  }
  /// A chunk with one choice: a chat delta (reasoning, content, tool calls) or a completion's text.
  const std::string& choice(size_t index, bool chat, const std::string& reasoning, const std::string& content,
                            const Json& tool_calls, const Json& logprobs, const char* finish_reason) {
    out_.assign(prefix_);
    out_ += fmt::format("{{\"index\":{},", index);
    if (chat) {
      out_ += "\"delta\":{";
      bool first = true;
      const auto field = [&](const char* name) {
        if (!first) out_ += ',';
        first = false;
        out_ += fmt::format("\"{}\":", name);
      };
      if (!reasoning.empty()) {
        field("reasoning_content");
        append_json_string(out_, reasoning);
      }
      if (!content.empty()) {
        field("content");
        append_json_string(out_, content);
      }
      if (!tool_calls.is_null()) {
        field("tool_calls");
        out_ += dump(tool_calls);
      }
      out_ += "},";
    } else {
      out_ += "\"text\":";
      append_json_string(out_, content);
      out_ += ',';
    }
    out_ += "\"logprobs\":";
    out_ += logprobs.is_null() ? std::string("null") : dump(logprobs);
    out_ += ",\"finish_reason\":";
    out_ += finish_reason == nullptr ? std::string("null") : fmt::format("\"{}\"", finish_reason);
    out_ += '}';
    out_ += suffix_;
    return out_;
  }

 private:
  std::string prefix_, suffix_, out_;
};

// OpenAI's finish reason; a choice that stopped after making calls reports "tool_calls".
const char* finish_reason(const RequestEvent& e, const Choice& c) {
  if (e.finish_reason == FinishReason::kStop && c.tools && c.tools->found_calls()) return "tool_calls";
  return finish_reason_name(e.finish_reason);
}

Json tool_calls_json(std::span<const ToolCall> calls, size_t first_index, bool with_index) {
  Json out = Json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    Json call = {{"id", calls[k].id},
                 {"type", "function"},
                 {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
    if (with_index) call["index"] = first_index + k;
    out.push_back(std::move(call));
  }
  return out;
}

// A response that is not streamed writes nothing until it is whole, so a client that hangs up would go unnoticed:
// this waits for the socket to turn readable and, when a peek finds the end of the stream (or an error) rather than
// a pipelined request, closes the channel; the request's loop then cancels its engine requests. A readiness that
// finds nothing to read (it happens) waits again. `done` is set by the request once its response is decided; the
// watcher then touches nothing else (the socket may be gone).
net::awaitable<void> watch_hang_up(net::ip::tcp::socket& socket, std::shared_ptr<EventChannel> channel,
                                   std::shared_ptr<bool> done) {
  for (;;) {
    auto [ec] = co_await socket.async_wait(net::socket_base::wait_read, kAwait);
    if (*done || ec) co_return;
    char byte = 0;
    const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) co_return;  // the client's next request: it is still there
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    channel->close();  // 0: the client closed its side; < 0: the connection failed
    co_return;
  }
}

}  // namespace

net::awaitable<bool> serve_generation(ServerContext& ctx, HttpStream& stream, const HttpRequest& req,
                                      Endpoint endpoint) {
  const ExtraHeaders headers = ctx.cors(req);
  const auto reject = [&](const ApiError& e) -> net::awaitable<bool> {
    ctx.metrics.record_rejected(e.status);
    co_return co_await send_response(stream, req, static_cast<http::status>(e.status), kJsonType, e.body(), headers);
  };
  Engine* engine = ctx.engine.load();
  if (engine == nullptr || ctx.draining) {
    ApiError e;
    e.status = 503;
    e.type = "server_error";
    e.message = engine == nullptr ? "the model is still loading; retry when GET /health answers 200"
                                  : "the server is shutting down";
    co_return co_await reject(e);
  }
  auto parsed = parse_generation_request(req.body(), endpoint);
  if (auto* e = std::get_if<ApiError>(&parsed)) co_return co_await reject(*e);
  GenerationRequest& g = std::get<GenerationRequest>(parsed);
  if (!g.model.empty() && g.model != ctx.config.served_model_name) {
    ApiError e;
    e.status = 404;
    e.type = "not_found_error";
    e.param = "model";
    e.code = "model_not_found";
    e.message =
        fmt::format("The model '{}' does not exist; this server serves '{}'", g.model, ctx.config.served_model_name);
    co_return co_await reject(e);
  }
  if (engine->stats().num_waiting + g.n > ctx.config.max_queue) {
    ApiError e;
    e.status = 429;
    e.type = "rate_limit_error";
    e.message = fmt::format("the server's queue is full ({} requests waiting); retry later", ctx.config.max_queue);
    co_return co_await reject(e);
  }
  auto prompt = build_prompt(*engine, g);
  if (auto* e = std::get_if<ApiError>(&prompt)) co_return co_await reject(*e);
  const std::vector<int32_t>& ids = std::get<Prompt>(prompt).ids;

  // Submit the n copies; each has its own random stream (seed + index when the client gave a seed).
  auto channel = std::make_shared<EventChannel>(co_await net::this_coro::executor, EventRouter::kChannelCapacity);
  std::vector<Choice> choices(static_cast<size_t>(g.n));
  if (endpoint == Endpoint::kChat && g.tools.is_array() && g.tool_choice != "none") {
    for (Choice& c : choices) {
      c.tools.emplace(call_format(*engine));
      (void)c.tools->feed(std::get<Prompt>(prompt).forced_call);  // the call's opening is the parser's too
    }
  }
  std::unordered_map<uint64_t, size_t> index_of;
  const auto cancel_unfinished = [&] {
    for (const Choice& c : choices) {
      if (c.id != 0 && !c.finished) {
        ctx.router->forget(c.id);
        (void)engine->cancel(c.id);
      }
    }
  };
  for (size_t i = 0; i < choices.size(); ++i) {
    SamplingParams params = g.params;
    if (params.seed) params.seed = *params.seed + i;
    auto id = ctx.router->submit([&] { return engine->submit(ids, params); }, channel);
    if (!id) {
      cancel_unfinished();
      co_return co_await reject(ApiError::from_status(id.status()));
    }
    choices[i].id = *id;
    index_of[*id] = i;
  }
  ctx.in_flight++;
  struct InFlight {
    std::atomic<int>& n;
    ~InFlight() { n--; }
  } in_flight{ctx.in_flight};

  const bool chat = endpoint == Endpoint::kChat;
  const Tokenizer* tok = engine->tokenizer();
  const std::string id = random_id(chat ? "chatcmpl" : "cmpl");
  const int64_t created = unix_seconds();
  const std::string& model = ctx.config.served_model_name;
  const auto chunk = [&](Json choices_json) {
    Json c = {{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", std::move(choices_json)}};
    if (g.include_usage) c["usage"] = nullptr;
    return dump(c);
  };

  ChunkWriter writer(id, chat, created, model, g.include_usage);
  EventStream sse(stream, req, headers);
  if (g.stream) {
    if (!co_await sse.open()) {
      cancel_unfinished();
      co_return false;
    }
    if (chat) {
      Json first = Json::array();
      for (size_t i = 0; i < choices.size(); ++i) {
        first.push_back({{"index", i},
                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                         {"logprobs", nullptr},
                         {"finish_reason", nullptr}});
      }
      if (!co_await sse.send(chunk(std::move(first)))) {
        cancel_unfinished();
        co_return false;
      }
    }
  }

  // Completions with echo start with the prompt.
  const std::string& echo_text = std::get<Prompt>(prompt).echo_text;
  if (!chat && g.echo) {
    for (Choice& c : choices) {
      c.content = echo_text;
      c.text_bytes = echo_text.size();
    }
    if (g.stream) {
      Json echoed = Json::array();
      for (size_t i = 0; i < choices.size(); ++i) {
        echoed.push_back({{"index", i}, {"text", echo_text}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
      }
      if (!co_await sse.send(chunk(std::move(echoed)))) {
        cancel_unfinished();
        co_return false;
      }
    }
  }

  // Without a stream, a hang-up is seen only by watching the socket; the watcher is stopped on every way out.
  const auto done = std::make_shared<bool>(false);
  if (!g.stream) net::co_spawn(stream.get_executor(), watch_hang_up(stream.socket(), channel, done), net::detached);
  struct StopWatching {
    HttpStream& stream;
    bool streaming;
    std::shared_ptr<bool> done;
    ~StopWatching() {
      if (streaming) return;
      *done = true;
      boost::system::error_code ignored;
      stream.socket().cancel(ignored);
    }
  } stop_watching{stream, g.stream, done};

  size_t open = choices.size();
  std::string error;
  while (open > 0) {
    auto [ec, ev] = co_await channel->async_receive(kAwait);
    if (ec) {  // the router closed the channel: shutdown, or this client fell too far behind
      cancel_unfinished();
      co_return false;
    }
    auto it = index_of.find(ev.request_id);
    if (it == index_of.end()) continue;
    const size_t i = it->second;
    Choice& c = choices[i];
    const double now = steady_seconds();
    if (!ev.token_ids.empty()) {
      if (c.last_token_at > 0.0) {
        ctx.metrics.record_inter_token((now - c.last_token_at) / static_cast<double>(ev.token_ids.size()));
      }
      c.last_token_at = now;
    }
    ReasoningSplitter::Delta delta;
    if (chat && ctx.reasoning) {
      delta = c.splitter.feed(ev.text);
      if (ev.finished) {
        ReasoningSplitter::Delta rest = c.splitter.finish();
        delta.reasoning += rest.reasoning;
        delta.content += rest.content;
      }
    } else {
      delta.content = ev.text;
    }
    std::vector<ToolCall> new_calls;
    if (c.tools) {
      ToolCallParser::Delta t = c.tools->feed(delta.content);
      if (ev.finished) {
        ToolCallParser::Delta rest = c.tools->finish();
        t.content += rest.content;
        for (auto& call : rest.calls) t.calls.push_back(std::move(call));
      }
      delta.content = std::move(t.content);
      new_calls = std::move(t.calls);
    }
    Json lp = nullptr;
    if (g.logprobs >= 0) {
      if (chat) {
        lp = chat_logprobs(tok, ev.logprobs);
      } else {
        Json piece = nullptr;
        if (g.echo && (!c.prompt_reported || !ev.prompt_logprobs.empty())) {
          // The prompt's tokens first; its first token has no logprob (null).
          std::vector<TokenLogprob> records;
          const bool first = !c.prompt_reported;
          if (first) records.push_back(TokenLogprob{ids.front(), 0.0f, {}});
          records.insert(records.end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());
          completion_logprobs(tok, records, c.prompt_bytes, first, piece);
          for (const TokenLogprob& r : records) c.prompt_bytes += token_text(tok, r.token).size();
          c.prompt_reported = true;
        }
        completion_logprobs(tok, ev.logprobs, c.text_bytes, false, piece);
        lp = piece;
        if (!g.stream) {
          if (c.completion_logprobs.is_null()) {
            c.completion_logprobs = piece;
          } else {
            for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
              for (auto& x : piece[key]) c.completion_logprobs[key].push_back(x);
            }
          }
        }
      }
    }
    c.text_bytes += ev.text.size();
    if (ev.finished) {
      c.finished = true;
      c.last = ev;
      --open;
      if (ev.finish_reason == FinishReason::kError && error.empty()) error = ev.error;
    }
    if (g.stream) {
      Json calls = nullptr;
      if (!new_calls.empty()) calls = tool_calls_json(new_calls, c.calls.size(), true);
      c.calls.insert(c.calls.end(), new_calls.begin(), new_calls.end());
      if (chat && delta.reasoning.empty() && delta.content.empty() && calls.is_null() && !ev.finished && lp.is_null()) {
        continue;  // nothing to say yet (a held-back tag or call)
      }
      const std::string& payload = writer.choice(i, chat, delta.reasoning, delta.content, calls, lp,
                                                 ev.finished ? finish_reason(ev, c) : nullptr);
      if (!co_await sse.send(payload)) {
        cancel_unfinished();
        co_return false;
      }
    } else {
      c.content += delta.content;
      c.reasoning += delta.reasoning;
      c.calls.insert(c.calls.end(), new_calls.begin(), new_calls.end());
      if (chat && g.logprobs >= 0) c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    }
  }

  if (g.stream) {
    if (!error.empty()) {
      ApiError e;
      e.status = 500;
      e.type = "server_error";
      e.message = error;
      if (!co_await sse.send(e.body())) co_return false;
    }
    if (g.include_usage) {
      Json last = {{"id", id},
                   {"object", chat ? "chat.completion.chunk" : "text_completion"},
                   {"created", created},
                   {"model", model},
                   {"choices", Json::array()},
                   {"usage", usage_json(choices)}};
      if (!co_await sse.send(dump(last))) co_return false;
    }
    const std::string_view done = "[DONE]";
    if (!co_await sse.send(done)) co_return false;
    co_return co_await sse.close();
  }

  if (!error.empty()) {
    ApiError e;
    e.status = 500;
    e.type = "server_error";
    e.message = error;
    co_return co_await send_response(stream, req, http::status::internal_server_error, kJsonType, e.body(), headers);
  }
  Json out_choices = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& c = choices[i];
    if (chat) {
      Json message = {{"role", "assistant"}, {"content", c.content}};
      if (ctx.reasoning && !c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
      if (!c.calls.empty()) {
        message["tool_calls"] = tool_calls_json(c.calls, 0, false);
        if (c.content.empty()) message["content"] = nullptr;
      }
      out_choices.push_back({{"index", i},
                             {"message", message},
                             {"logprobs", g.logprobs >= 0 ? chat_logprobs(tok, c.logprobs) : Json(nullptr)},
                             {"finish_reason", finish_reason(c.last, c)}});
    } else {
      out_choices.push_back({{"index", i},
                             {"text", c.content},
                             {"logprobs", g.logprobs >= 0 ? c.completion_logprobs : Json(nullptr)},
                             {"finish_reason", finish_reason(c.last, c)}});
    }
  }
  Json body = {{"id", id},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"created", created},
               {"model", model},
               {"choices", out_choices},
               {"usage", usage_json(choices)}};
  co_return co_await send_response(stream, req, http::status::ok, kJsonType, dump(body), headers);
}

}  // namespace photon::server
