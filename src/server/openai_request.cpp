#include "server/openai_request.hpp"

#include <cstring>

#include <fmt/format.h>

namespace photon::server {
namespace {

using Json = nlohmann::ordered_json;

// Typed readers: absent or null keeps the default; a wrong type is a 400 naming the field.
struct Reader {
  const Json& body;
  std::optional<ApiError> error;

  const Json* get(const char* key) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
  }
  void fail(const char* key, const std::string& what) {
    if (!error) error = ApiError::bad_request(fmt::format("'{}' {}", key, what), key);
  }
  template <typename T>
  void number(const char* key, T& out, double lo, double hi) {
    const Json* v = get(key);
    if (v == nullptr) return;
    if (!v->is_number() || (std::is_integral_v<T> && !v->is_number_integer())) {
      fail(key, std::is_integral_v<T> ? "must be an integer" : "must be a number");
      return;
    }
    const double d = v->get<double>();
    if (!(d >= lo && d <= hi)) {
      fail(key, fmt::format("must be from {} to {}, not {}", lo, hi, v->dump()));
      return;
    }
    out = v->get<T>();
  }
  void boolean(const char* key, bool& out) {
    const Json* v = get(key);
    if (v == nullptr) return;
    if (!v->is_boolean()) return fail(key, "must be true or false");
    out = v->get<bool>();
  }
  void string(const char* key, std::string& out) {
    const Json* v = get(key);
    if (v == nullptr) return;
    if (!v->is_string()) return fail(key, "must be a string");
    out = v->get<std::string>();
  }
};

void read_stop(Reader& r, SamplingParams& p) {
  const Json* v = r.get("stop");
  if (v == nullptr) return;
  if (v->is_string()) {
    if (!v->get<std::string>().empty()) p.stop.push_back(v->get<std::string>());
    return;
  }
  if (!v->is_array() || v->size() > 16) return r.fail("stop", "must be a string or a list of up to 16 strings");
  for (const Json& s : *v) {
    if (!s.is_string()) return r.fail("stop", "must be a string or a list of up to 16 strings");
    if (!s.get<std::string>().empty()) p.stop.push_back(s.get<std::string>());
  }
}

// OpenAI's {"token id": bias} with biases from -100 to 100 (the engine checks the ids against the vocabulary).
void read_logit_bias(Reader& r, SamplingParams& p) {
  const Json* v = r.get("logit_bias");
  if (v == nullptr) return;
  if (!v->is_object()) return r.fail("logit_bias", "must be an object mapping token ids to biases");
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& key = it.key();
    const bool id_ok = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos &&
                       std::stoll(key) <= INT32_MAX;
    if (!id_ok) return r.fail("logit_bias", fmt::format("keys must be token ids, not \"{}\"", key));
    if (!it->is_number() || !(it->get<double>() >= -100.0 && it->get<double>() <= 100.0)) {
      return r.fail("logit_bias", fmt::format("values must be numbers from -100 to 100, not {}", it->dump()));
    }
    p.logit_bias.emplace_back(static_cast<int32_t>(std::stoll(key)), it->get<float>());
  }
}

// Plain text is what this server produces; JSON modes need constrained decoding, which it does not do.
void read_response_format(Reader& r) {
  const Json* v = r.get("response_format");
  if (v == nullptr) return;
  const auto type = v->is_object() ? v->find("type") : v->end();
  if (!v->is_object() || type == v->end() || !type->is_string()) {
    return r.fail("response_format", "must be {\"type\": \"text\"}");
  }
  if (*type != "text") {
    r.fail("response_format", fmt::format("type {} is not supported: replies are plain text (describe the format in "
                                          "the prompt instead)",
                                          type->dump()));
  }
}

void read_sampling(Reader& r, GenerationRequest& g) {
  SamplingParams& p = g.params;
  p.max_tokens = 0;
  int64_t max_tokens = -1;
  r.number("max_tokens", max_tokens, 1, 1 << 30);
  if (g.endpoint == Endpoint::kChat) r.number("max_completion_tokens", max_tokens, 1, 1 << 30);
  if (max_tokens > 0) {
    p.max_tokens = static_cast<int32_t>(max_tokens);
    g.max_tokens_given = true;
  } else if (g.endpoint == Endpoint::kCompletion) {
    p.max_tokens = 16;  // OpenAI's default for completions
    g.max_tokens_given = true;
  }
  r.number("temperature", p.temperature, 0.0, 2.0);
  r.number("top_p", p.top_p, 1e-9, 1.0);
  int64_t top_k = 0;
  r.number("top_k", top_k, -1, 1 << 30);
  p.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
  r.number("min_p", p.min_p, 0.0, 1.0);
  r.number("presence_penalty", p.presence_penalty, -2.0, 2.0);
  r.number("frequency_penalty", p.frequency_penalty, -2.0, 2.0);
  r.number("repetition_penalty", p.repetition_penalty, 1e-9, 100.0);
  int64_t seed = 0;
  if (r.get("seed") != nullptr) {
    r.number("seed", seed, -9.2e18, 9.2e18);
    p.seed = static_cast<uint64_t>(seed);
  }
  r.boolean("ignore_eos", p.ignore_eos);
  read_stop(r, p);
  read_logit_bias(r, p);
  read_response_format(r);
  int64_t n = 1;
  r.number("n", n, 1, 16);
  g.n = static_cast<int>(n);
  if (const Json* b = r.get("best_of"); b != nullptr && !(b->is_number_integer() && b->get<int64_t>() == n)) {
    r.fail("best_of", "is not supported (use n)");
  }
  r.boolean("stream", g.stream);
  if (const Json* so = r.get("stream_options")) {
    if (!so->is_object()) {
      r.fail("stream_options", "must be an object");
    } else if (auto it = so->find("include_usage"); it != so->end() && !it->is_null()) {
      if (!it->is_boolean()) {
        r.fail("stream_options", "include_usage must be true or false");
      } else {
        g.include_usage = it->get<bool>();
      }
    }
  }
  r.string("user", g.user);
  r.string("model", g.model);
}

void read_chat(Reader& r, GenerationRequest& g) {
  const Json* messages = r.get("messages");
  if (messages == nullptr) return r.fail("messages", "is required");
  if (!messages->is_array() || messages->empty()) return r.fail("messages", "must be a non-empty list");
  for (const Json& m : *messages) {
    if (!m.is_object()) return r.fail("messages", "must hold objects");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return r.fail("messages", "each message needs a string 'role'");
    const std::string rs = role->get<std::string>();
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool" && rs != "developer") {
      return r.fail("messages", fmt::format("has an unknown role '{}'", rs));
    }
    auto content = m.find("content");
    if (content != m.end() && !content->is_null() && !content->is_string() && !content->is_array()) {
      return r.fail("messages", "content must be a string or a list of parts");
    }
  }
  // Content given as a list of text parts is joined into one string and absent content is "" (what chat templates
  // expect), and the arguments of earlier tool calls, which clients send as JSON text, become objects (what
  // templates print).
  g.messages = *messages;
  for (Json& m : g.messages) {
    if (auto c = m.find("content"); c == m.end() || c->is_null()) m["content"] = "";  // templates test it as text
    if (auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array()) {
      for (Json& call : *calls) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        Json& args = call["function"]["arguments"];
        if (!args.is_string()) continue;
        Json parsed = Json::parse(args.get<std::string>(), nullptr, false);
        if (parsed.is_object()) args = std::move(parsed);
      }
    }
    auto content = m.find("content");
    if (content == m.end() || !content->is_array()) continue;
    std::string text;
    for (const Json& part : *content) {
      auto type = part.find("type");
      auto t = part.find("text");
      if (!part.is_object() || type == part.end() || *type != "text" || t == part.end() || !t->is_string()) {
        return r.fail("messages", "content parts must be {\"type\": \"text\", \"text\": ...} (no images here)");
      }
      text += t->get<std::string>();
    }
    *content = text;
  }
  if (const Json* tools = r.get("tools")) {
    if (!tools->is_array()) return r.fail("tools", "must be a list");
    for (const Json& t : *tools) {
      if (!t.is_object() || !t.contains("function") || !t["function"].is_object() || !t["function"].contains("name") ||
          !t["function"]["name"].is_string()) {
        return r.fail("tools", "each tool needs {\"type\": \"function\", \"function\": {\"name\": ...}}");
      }
    }
    if (!tools->empty()) g.tools = *tools;
  }
  if (const Json* choice = r.get("tool_choice")) {
    if (choice->is_string()) {
      g.tool_choice = choice->get<std::string>();
      if (g.tool_choice != "auto" && g.tool_choice != "none" && g.tool_choice != "required") {
        return r.fail("tool_choice", "must be auto, none, required or {\"type\": \"function\", ...}");
      }
    } else if (choice->is_object() && choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].contains("name") && (*choice)["function"]["name"].is_string()) {
      g.tool_choice = "function:" + (*choice)["function"]["name"].get<std::string>();
    } else {
      return r.fail("tool_choice", "must be auto, none, required or {\"type\": \"function\", ...}");
    }
  }
  if (g.tool_choice == "required" && !g.tools.is_array()) return r.fail("tool_choice", "required needs tools");
  if (g.tool_choice.starts_with("function:")) {
    const std::string name = g.tool_choice.substr(std::strlen("function:"));
    bool known = false;
    if (g.tools.is_array()) {
      for (const Json& t : g.tools) known = known || t["function"]["name"] == name;
    }
    if (!known) return r.fail("tool_choice", "names the function '" + name + "', which is not among the tools");
  }
  if (const Json* kw = r.get("chat_template_kwargs")) {
    if (!kw->is_object()) return r.fail("chat_template_kwargs", "must be an object");
    g.chat_template_kwargs = *kw;
  }
  bool logprobs = false;
  r.boolean("logprobs", logprobs);
  int64_t top = 0;
  r.number("top_logprobs", top, 0, 20);
  if (top > 0 && !logprobs) r.fail("top_logprobs", "needs logprobs: true");
  if (logprobs) g.logprobs = static_cast<int>(top);
}

void read_completion(Reader& r, GenerationRequest& g) {
  const Json* prompt = r.get("prompt");
  if (prompt == nullptr) return r.fail("prompt", "is required");
  const Json* p = prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    g.prompt_text = p->get<std::string>();
    if (g.prompt_text.empty()) return r.fail("prompt", "is empty");
  } else if (p->is_array() && !p->empty() &&
             std::all_of(p->begin(), p->end(), [](const Json& x) { return x.is_number_integer(); })) {
    for (const Json& x : *p) {
      const int64_t id = x.get<int64_t>();
      if (id < 0 || id > INT32_MAX) return r.fail("prompt", "token ids must be non-negative 32-bit integers");
      g.prompt_ids.push_back(static_cast<int32_t>(id));
    }
    g.prompt_is_ids = true;
  } else {
    return r.fail("prompt", "must be a string or a list of token ids (one prompt per request)");
  }
  r.boolean("echo", g.echo);
  int64_t logprobs = -1;
  r.number("logprobs", logprobs, 0, 20);
  g.logprobs = static_cast<int>(logprobs);
  if (const Json* suffix = r.get("suffix"); suffix != nullptr) r.fail("suffix", "is not supported");
}

}  // namespace

std::variant<GenerationRequest, ApiError> parse_generation_request(std::string_view body, Endpoint endpoint) {
  Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return ApiError::bad_request("the request body is not valid JSON");
  if (!json.is_object()) return ApiError::bad_request("the request body must be a JSON object");
  GenerationRequest g;
  g.endpoint = endpoint;
  Reader r{json, std::nullopt};
  read_sampling(r, g);
  if (endpoint == Endpoint::kChat) {
    read_chat(r, g);
  } else {
    read_completion(r, g);
  }
  if (r.error) return *r.error;
  if (g.logprobs >= 0) g.params.logprobs = g.logprobs;
  if (g.echo && g.logprobs >= 0) g.params.prompt_logprobs = g.logprobs;
  return g;
}

}  // namespace photon::server
