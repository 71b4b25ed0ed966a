// PhotonInfer — chat templates: a model's own Jinja template (tokenizer_config.json "chat_template") rendered the way
// transformers' apply_chat_template does it (Jinja2 with trim_blocks and lstrip_blocks, loop controls, the tojson,
// raise_exception and strftime_now helpers), by an interpreter written in the project: no Python at run time.
//
// Supported: text, {{ }}, {% %}, {# #} with whitespace control; if / elif / else, for (with loop.*, an inline
// `if` filter, `else`, tuple unpacking), set (including namespace attributes and block sets), break / continue,
// macros; literals (strings with Python's escapes), lists, dicts, attribute / index / slice access, calls with
// keyword arguments, `~ + - * / // % **` (`%` on a string: printf-style formatting), comparisons, `in`, `and or
// not`, conditional expressions; filters (trim, length, count, tojson with ensure_ascii / indent / separators /
// sort_keys, string, format, upper, lower, title, capitalize, replace, default, join, first, last, list, reverse,
// unique, min, max, sum, round, dictsort, int, float, abs, items, selectattr, rejectattr, map, indent, safe); tests
// (defined, undefined, none, string, number, integer, float, boolean, true, false, mapping, sequence, iterable,
// callable, odd, even, lower, upper, equalto, in); string methods (strip, lstrip, rstrip, split, startswith,
// endswith, upper, lower, title, capitalize, replace, find, count, join) and dict methods (items, keys, values,
// get). Tuples are lists (they print with brackets). Anything else is an error with line and column.
//
// Thread safety: a loaded ChatTemplate is immutable; render may run concurrently from any threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <photon/export.hpp>
#include <photon/status.hpp>

namespace photon {

class PHOTON_API ChatTemplate {
 public:
  /// Reads `dir`/tokenizer_config.json: its "chat_template" (a string, or a list of {"name", "template"} of which
  /// "default" is used) and its special tokens (bos_token, eos_token, ...), which templates read as variables.
  /// With `template_file`, the template's source is that file (a Jinja template) instead, and the special tokens
  /// still come from `dir`/tokenizer_config.json when it exists. Errors: kNotFound for a folder without a template.
  static Result<std::unique_ptr<ChatTemplate>> load(const std::string& dir, const std::string& template_file = "");
  /// From template source; `variables_json` is a JSON object of variables every render sees (e.g. bos_token).
  static Result<std::unique_ptr<ChatTemplate>> from_source(std::string_view source,
                                                           std::string_view variables_json = "{}");
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  struct Options {
    bool add_generation_prompt = true;  ///< end with the header of the assistant's turn
    std::string extra_json;             ///< a JSON object of extra variables (e.g. {"enable_thinking": false})
  };

  /// Renders `messages_json` (a JSON array of {"role", "content", ...} objects, OpenAI style) with `tools_json`
  /// (a JSON array of tool definitions, or empty for none). Errors name what is wrong; a template's own
  /// raise_exception(...) becomes an error with its message.
  Result<std::string> render(std::string_view messages_json, std::string_view tools_json, const Options& options) const;

 private:
  ChatTemplate();
  static Result<std::unique_ptr<ChatTemplate>> load_impl(const std::string& dir, const std::string& template_file);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace photon
