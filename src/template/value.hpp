// Values of the Jinja subset used by chat templates, with Python's semantics where templates rely on them:
// truthiness, `+`, comparisons, str() / repr() output, and json.dumps for the `tojson` filter.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <photon/status.hpp>

namespace photon::jinja {

struct Value;
using List = std::vector<Value>;
/// Insertion-ordered mapping (Python dicts keep order, and tojson must too).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(std::string key, Value v);
};
struct Undefined {
  std::string name;  // what was looked up, for error messages
};
struct None {};
/// Built-in functions and methods: positional and keyword arguments.
using Callable =
    std::function<Result<Value>(std::vector<Value>& args, std::vector<std::pair<std::string, Value>>& kwargs)>;

struct Value {
  // A namespace() object is a Dict that assignments may change (`{% set ns.x = 1 %}`): shared by reference.
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>, std::shared_ptr<Dict>,
               std::shared_ptr<Callable>>
      v;
  bool is_namespace = false;

  Value() = default;
  static Value none() { return Value{None{}}; }
  static Value undefined(std::string name = {}) { return Value{Undefined{std::move(name)}}; }
  Value(None n) : v(n) {}
  Value(Undefined u) : v(std::move(u)) {}
  Value(bool b) : v(b) {}
  Value(int64_t i) : v(i) {}
  Value(int i) : v(static_cast<int64_t>(i)) {}
  Value(double d) : v(d) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(const char* s) : v(std::string(s)) {}
  Value(List l) : v(std::make_shared<List>(std::move(l))) {}
  Value(Dict d) : v(std::make_shared<Dict>(std::move(d))) {}
  Value(Callable c) : v(std::make_shared<Callable>(std::move(c))) {}

  bool is_undefined() const { return std::holds_alternative<Undefined>(v); }
  bool is_none() const { return std::holds_alternative<None>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }
  bool is_float() const { return std::holds_alternative<double>(v); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(v); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(v); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<Callable>>(v); }
  const std::string& str() const { return std::get<std::string>(v); }
  List& list() const { return *std::get<std::shared_ptr<List>>(v); }
  Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(v); }
  double number() const { return is_int() ? static_cast<double>(std::get<int64_t>(v)) : std::get<double>(v); }

  /// Python truthiness.
  bool truthy() const;
  /// What `{{ value }}` prints: str(value), with Python's spelling of None, True, lists and dicts.
  std::string to_output() const;
  /// Python repr() (strings quoted), used inside printed lists and dicts.
  std::string repr() const;
  /// Python == (1 == 1.0; lists and dicts element-wise).
  bool equals(const Value& other) const;
};

/// json.dumps's layout arguments. indent < 0: None (one line). Empty separators: Python's defaults (", " or, with
/// an indent, ","; and ": ").
struct JsonStyle {
  int indent = -1;
  std::string item_separator, key_separator;
  bool sort_keys = false;
  bool ensure_ascii = false;  // escape every character past ASCII, and DEL, as \\uXXXX (surrogate pairs past U+FFFF)
};
/// json.dumps(value, ensure_ascii=..., indent=..., separators=..., sort_keys=...) exactly as Python prints it.
Result<std::string> to_json(const Value& value, const JsonStyle& style = {});
/// A JSON document (request messages, tools, extra variables) as a Value.
Value from_json(const nlohmann::ordered_json& j);

}  // namespace photon::jinja
