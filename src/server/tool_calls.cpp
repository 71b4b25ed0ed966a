#include "server/tool_calls.hpp"

#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace photon::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

std::string call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("call_{:016x}", rng());
}

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

bool one_call(const Json& j, std::vector<ToolCall>& out) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  std::string arguments = "{}";
  if (args != j.end()) {
    if (args->is_object()) {
      arguments = args->dump();
    } else if (args->is_string() && Json::parse(args->get<std::string>(), nullptr, false).is_object()) {
      arguments = args->get<std::string>();
    } else {
      return false;
    }
  }
  out.push_back({call_id(), name->get<std::string>(), std::move(arguments)});
  return true;
}

}  // namespace

std::string call_opening(ToolCallFormat format, std::string_view function_name) {
  const bool hermes = format == ToolCallFormat::kHermes;
  std::string out = hermes ? "<tool_call>\n" : "";
  if (function_name.empty()) return hermes ? out : "{\"name\": \"";
  out += "{\"name\": " + Json(std::string(function_name)).dump() + ", ";
  out += hermes ? "\"arguments\": " : "\"parameters\": ";
  return out;
}

std::vector<ToolCall> parse_call_objects(std::string_view json_text) {
  std::vector<ToolCall> calls;
  const Json j = Json::parse(json_text, nullptr, false);
  if (j.is_discarded()) return {};
  if (j.is_array()) {
    for (const Json& x : j) {
      if (!one_call(x, calls)) return {};
    }
    return calls;
  }
  if (!one_call(j, calls)) return {};
  return calls;
}

ToolCallParser::Delta ToolCallParser::feed_hermes(std::string_view text) {
  Delta d;
  pending_.append(text);
  for (;;) {
    if (!inside_) {
      const size_t at = pending_.find(kOpen);
      if (at == std::string::npos) break;
      d.content.append(pending_, 0, at);
      pending_.erase(0, at + kOpen.size());
      inside_ = true;
    }
    const size_t end = pending_.find(kClose);
    if (end == std::string::npos) return d;  // the call is not whole yet
    auto calls = parse_call_objects(trim(std::string_view(pending_).substr(0, end)));
    if (calls.empty()) {
      d.content.append(kOpen).append(pending_, 0, end + kClose.size());  // not a call: it stays text
    } else {
      found_ = true;
      for (auto& c : calls) d.calls.push_back(std::move(c));
    }
    pending_.erase(0, end + kClose.size());
    inside_ = false;
  }
  const size_t keep = partial_tag(pending_, kOpen);
  d.content.append(pending_, 0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return d;
}

ToolCallParser::Delta ToolCallParser::feed(std::string_view text) {
  if (format_ == ToolCallFormat::kHermes) return feed_hermes(text);
  Delta d;
  if (decided_ && !buffering_) {
    d.content = text;
    return d;
  }
  pending_.append(text);
  if (!decided_) {
    const std::string_view head = trim(pending_);
    if (head.empty()) return d;
    if (head.front() == '{' || head.front() == '[' || head.starts_with(kPythonTag)) {
      buffering_ = true;
    } else if (!(kPythonTag.starts_with(head))) {
      buffering_ = false;  // plain text
    } else {
      return d;  // could still become <|python_tag|>
    }
    decided_ = true;
    if (!buffering_) {
      d.content = std::move(pending_);
      pending_.clear();
    }
  }
  return d;
}

ToolCallParser::Delta ToolCallParser::finish() {
  Delta d;
  if (format_ == ToolCallFormat::kHermes) {
    if (inside_) d.content.append(kOpen);
    d.content.append(pending_);
    pending_.clear();
    return d;
  }
  std::string_view body = trim(pending_);
  if (body.starts_with(kPythonTag)) body = trim(body.substr(kPythonTag.size()));
  // Several calls may be separated by ';'.
  std::vector<ToolCall> calls;
  bool all = !body.empty();
  for (size_t start = 0; all && start < body.size();) {
    size_t end = body.find(';', start);
    if (end == std::string_view::npos) end = body.size();
    auto part = parse_call_objects(trim(body.substr(start, end - start)));
    if (part.empty()) {
      // A ';' inside an argument string: try the rest as one object.
      part = parse_call_objects(trim(body.substr(start)));
      if (part.empty()) all = false;
      end = body.size();
    }
    for (auto& c : part) calls.push_back(std::move(c));
    start = end + 1;
  }
  if (all && !calls.empty()) {
    found_ = true;
    d.calls = std::move(calls);
  } else {
    d.content = pending_;
  }
  pending_.clear();
  return d;
}

}  // namespace photon::server
