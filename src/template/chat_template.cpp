#include <photon/chat_template.hpp>

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.hpp"
#include "template/parser.hpp"
#include "template/render.hpp"

namespace photon {

using ordered_json = nlohmann::ordered_json;

struct ChatTemplate::Impl {
  jinja::Body body;
  std::unordered_map<std::string, jinja::Value> variables;
};

ChatTemplate::ChatTemplate() : impl_(std::make_unique<Impl>()) {}
ChatTemplate::~ChatTemplate() = default;

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::from_source(std::string_view source,
                                                                std::string_view variables_json) {
  std::unique_ptr<ChatTemplate> t(new ChatTemplate());
  PHOTON_ASSIGN_OR_RETURN(t->impl_->body, jinja::parse(source));
  const ordered_json vars = ordered_json::parse(variables_json.empty() ? "{}" : variables_json, nullptr, false);
  if (vars.is_discarded() || !vars.is_object()) {
    return Status(StatusCode::kInvalidArgument, "template variables must be a JSON object");
  }
  for (auto it = vars.begin(); it != vars.end(); ++it) t->impl_->variables[it.key()] = jinja::from_json(*it);
  return t;
}

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::load(const std::string& dir, const std::string& template_file) {
  try {
    return load_impl(dir, template_file);
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
    return Status(StatusCode::kFormatError, fmt::format("{}/tokenizer_config.json: {}", dir, e.what()));
  }
}

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::load_impl(const std::string& dir,
                                                              const std::string& template_file) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  ordered_json cfg = ordered_json::object();
  std::error_code ec;
  if (template_file.empty() || std::filesystem::exists(path, ec)) {
    PHOTON_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
    cfg = ordered_json::parse(text, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) {
      return Status(StatusCode::kFormatError, fmt::format("{}: not a well-formed JSON object", path));
    }
  }
  const auto it = cfg.find("chat_template");
  std::string source;
  if (!template_file.empty()) {
    auto file = read_text_file(template_file);
    if (!file) return file.status().with_context("reading the chat template file");
    source = std::move(*file);
    if (source.empty()) return Status(StatusCode::kFormatError, fmt::format("{} is empty", template_file));
  } else if (it != cfg.end() && it->is_string()) {
    source = it->get<std::string>();
  } else if (it != cfg.end() && it->is_array()) {
    for (const auto& named : *it) {
      if (named.value("name", "") == "default" && named.value("template", ordered_json()).is_string()) {
        source = named["template"].get<std::string>();
      }
    }
  }
  if (source.empty()) {
    return Status(StatusCode::kNotFound, fmt::format("{} has no chat_template; give the prompt as plain text or "
                                                     "token ids",
                                                     path));
  }
  // Special tokens as variables: bos_token, eos_token, ... (strings or {"content": ...} objects).
  ordered_json vars = ordered_json::object();
  for (auto t = cfg.begin(); t != cfg.end(); ++t) {
    if (!t.key().ends_with("_token")) continue;
    if (t->is_string()) vars[t.key()] = *t;
    if (t->is_object() && t->contains("content") && (*t)["content"].is_string()) vars[t.key()] = (*t)["content"];
  }
  auto result = from_source(source, vars.dump());
  if (!result) return result.status().with_context(template_file.empty() ? path : template_file);
  return result;
}

Result<std::string> ChatTemplate::render(std::string_view messages_json, std::string_view tools_json,
                                         const Options& options) const {
  const ordered_json messages = ordered_json::parse(messages_json, nullptr, false);
  if (messages.is_discarded() || !messages.is_array()) {
    return Status(StatusCode::kInvalidArgument, "messages must be a JSON array of {\"role\", \"content\"} objects");
  }
  for (const auto& m : messages) {
    if (!m.is_object() || !m.value("role", ordered_json()).is_string()) {
      return Status(StatusCode::kInvalidArgument, "each message must be an object with a string 'role'");
    }
  }
  auto vars = impl_->variables;
  vars["messages"] = jinja::from_json(messages);
  vars["add_generation_prompt"] = jinja::Value(options.add_generation_prompt);
  vars["tools"] = jinja::Value::none();
  if (!tools_json.empty()) {
    const ordered_json tools = ordered_json::parse(tools_json, nullptr, false);
    if (tools.is_discarded() || !(tools.is_array() || tools.is_null())) {
      return Status(StatusCode::kInvalidArgument, "tools must be a JSON array");
    }
    vars["tools"] = jinja::from_json(tools);
  }
  if (!options.extra_json.empty()) {
    const ordered_json extra = ordered_json::parse(options.extra_json, nullptr, false);
    if (extra.is_discarded() || !extra.is_object()) {
      return Status(StatusCode::kInvalidArgument, "extra template variables must be a JSON object");
    }
    for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = jinja::from_json(*it);
  }
  return jinja::render(impl_->body, vars);
}

}  // namespace photon
