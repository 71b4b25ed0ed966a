#include "template/builtins.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

namespace photon::jinja {
namespace {

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && chars.find(s[b]) != std::string::npos) ++b;
  if (right)
    while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

const std::string kWhitespace = " \t\n\r\f\v";

Value kwarg(const Kwargs& kwargs, std::string_view name, const Args& args, size_t position, const Value& fallback) {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  return position < args.size() ? args[position] : fallback;
}

Result<Value> string_method(const std::string& s, const std::string& name) {
  auto chars_arg = [](const Args& a) { return a.empty() || a[0].is_none() ? kWhitespace : a[0].to_output(); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return Value(Callable([s, left, right, chars_arg](Args& a, Kwargs&) -> Result<Value> {
      return Value(strip_chars(s, chars_arg(a), left, right));
    }));
  }
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return Value(Callable([s, start](Args& a, Kwargs&) -> Result<Value> {
      if (a.empty()) return Status(StatusCode::kInvalidArgument, "startswith/endswith needs an argument");
      List options = a[0].is_list() ? a[0].list() : List{a[0]};
      for (const Value& o : options) {
        const std::string p = o.to_output();
        if (start ? s.starts_with(p) : s.ends_with(p)) return Value(true);
      }
      return Value(false);
    }));
  }
  if (name == "split" || name == "rsplit") {
    return Value(Callable([s](Args& a, Kwargs& kw) -> Result<Value> {
      const Value sep = kwarg(kw, "sep", a, 0, Value::none());
      const Value maxv = kwarg(kw, "maxsplit", a, 1, Value(-1));
      int64_t max_splits = maxv.is_int() ? std::get<int64_t>(maxv.v) : -1;
      List out;
      if (sep.is_none()) {  // runs of whitespace, no empty strings
        size_t i = 0;
        while (i < s.size()) {
          while (i < s.size() && kWhitespace.find(s[i]) != std::string::npos) ++i;
          if (i >= s.size()) break;
          if (max_splits == 0) {
            out.emplace_back(strip_chars(s.substr(i), kWhitespace, false, true));
            break;
          }
          size_t j = i;
          while (j < s.size() && kWhitespace.find(s[j]) == std::string::npos) ++j;
          out.emplace_back(s.substr(i, j - i));
          --max_splits;
          i = j;
        }
        return Value(std::move(out));
      }
      const std::string d = sep.to_output();
      if (d.empty()) return Status(StatusCode::kInvalidArgument, "split(): empty separator");
      size_t pos = 0;
      while (max_splits != 0) {
        const size_t hit = s.find(d, pos);
        if (hit == std::string::npos) break;
        out.emplace_back(s.substr(pos, hit - pos));
        pos = hit + d.size();
        --max_splits;
      }
      out.emplace_back(s.substr(pos));
      return Value(std::move(out));
    }));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return Value(Callable([s, name](Args&, Kwargs&) -> Result<Value> {
      std::string out = s;
      bool word_start = true;
      for (size_t i = 0; i < out.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(out[i]);
        if (name == "upper") {
          out[i] = static_cast<char>(std::toupper(c));
        } else if (name == "lower") {
          out[i] = static_cast<char>(std::tolower(c));
        } else if (name == "title") {
          out[i] = static_cast<char>(word_start ? std::toupper(c) : std::tolower(c));
          word_start = !std::isalpha(c);
        } else {
          out[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
        }
      }
      return Value(std::move(out));
    }));
  }
  if (name == "replace") {
    return Value(Callable([s](Args& a, Kwargs&) -> Result<Value> {
      if (a.size() < 2) return Status(StatusCode::kInvalidArgument, "replace() needs two arguments");
      const std::string from = a[0].to_output(), to = a[1].to_output();
      if (from.empty()) return Value(s);
      std::string out;
      size_t pos = 0;
      for (size_t hit = 0; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
        out.append(s, pos, hit - pos).append(to);
      }
      return Value(out.append(s, pos));
    }));
  }
  if (name == "find" || name == "count") {
    const bool count = name == "count";
    return Value(Callable([s, count](Args& a, Kwargs&) -> Result<Value> {
      if (a.empty()) return Status(StatusCode::kInvalidArgument, "find()/count() needs an argument");
      const std::string p = a[0].to_output();
      if (!count) {
        const size_t hit = s.find(p);
        return Value(hit == std::string::npos ? int64_t{-1} : static_cast<int64_t>(hit));
      }
      int64_t n = 0;
      for (size_t pos = 0; !p.empty() && (pos = s.find(p, pos)) != std::string::npos; pos += p.size()) ++n;
      return Value(n);
    }));
  }
  if (name == "join") {
    return Value(Callable([s](Args& a, Kwargs&) -> Result<Value> {
      if (a.empty() || !a[0].is_list()) return Status(StatusCode::kInvalidArgument, "join() needs a list");
      std::string out;
      for (size_t i = 0; i < a[0].list().size(); ++i) out += (i ? s : "") + a[0].list()[i].to_output();
      return Value(std::move(out));
    }));
  }
  return Value::undefined(name);
}

}  // namespace

Status error_at(const Expr& e, const std::string& message) {
  return Status(StatusCode::kInvalidArgument,
                fmt::format("template line {}, column {}: {}", e.line, e.column, message));
}

std::string type_name(const Value& v) {
  if (v.is_undefined()) return "undefined";
  if (v.is_none()) return "none";
  if (v.is_bool()) return "bool";
  if (v.is_int()) return "int";
  if (v.is_float()) return "float";
  if (v.is_string()) return "string";
  if (v.is_list()) return "list";
  if (v.is_dict()) return "dict";
  return "function";
}

// A string's characters (Python indexes, slices and counts code points, not bytes).
std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    size_t n = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

Result<Value> attribute(const Expr& e, const Value& obj, const std::string& name) {
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
    if (obj.is_namespace) return Value::undefined(name);
    const Value d = obj;
    if (name == "items") {
      return Value(Callable([d](Args&, Kwargs&) -> Result<Value> {
        List out;
        for (const auto& [k, v] : d.dict().items) out.push_back(Value(List{Value(k), v}));
        return Value(std::move(out));
      }));
    }
    if (name == "keys" || name == "values") {
      const bool keys = name == "keys";
      return Value(Callable([d, keys](Args&, Kwargs&) -> Result<Value> {
        List out;
        for (const auto& [k, v] : d.dict().items) out.push_back(keys ? Value(k) : v);
        return Value(std::move(out));
      }));
    }
    if (name == "get") {
      return Value(Callable([d](Args& a, Kwargs&) -> Result<Value> {
        if (a.empty() || !a[0].is_string()) return Status(StatusCode::kInvalidArgument, "get() needs a key");
        const Value* v = d.dict().find(a[0].str());
        return v ? *v : (a.size() > 1 ? a[1] : Value::none());
      }));
    }
    return Value::undefined(name);
  }
  if (obj.is_string()) return string_method(obj.str(), name);
  if (obj.is_list()) {
    if (name == "append") {
      return Value(Callable([l = obj](Args& a, Kwargs&) -> Result<Value> {
        for (auto& x : a) l.list().push_back(x);
        return Value::none();
      }));
    }
    return Value::undefined(name);
  }
  if (obj.is_undefined()) {
    return error_at(
        e, fmt::format("'{}' is undefined (reading its attribute '{}')", std::get<Undefined>(obj.v).name, name));
  }
  return Value::undefined(name);
}

Result<Value> apply_filter(const Expr& e, const std::string& name, Value v, Args& a, Kwargs& kw) {
  if (name == "trim") return Value(strip_chars(v.to_output(), a.empty() ? kWhitespace : a[0].to_output(), true, true));
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value(static_cast<int64_t>(characters(v.str()).size()));
    if (v.is_list()) return Value(static_cast<int64_t>(v.list().size()));
    if (v.is_dict()) return Value(static_cast<int64_t>(v.dict().items.size()));
    if (v.is_undefined()) return Value(int64_t{0});
    return error_at(e, fmt::format("length of a {}", type_name(v)));
  }
  if (name == "tojson") {
    const Value ind = kwarg(kw, "indent", a, 0, Value::none());
    auto json = to_json(v, ind.is_int() ? static_cast<int>(std::get<int64_t>(ind.v)) : -1);
    if (!json) return error_at(e, json.status().message());
    return Value(std::move(*json));
  }
  if (name == "string") return Value(v.to_output());
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    PHOTON_ASSIGN_OR_RETURN(Value m, string_method(v.to_output(), name));
    Args none;
    Kwargs nokw;
    return (*std::get<std::shared_ptr<Callable>>(m.v))(none, nokw);
  }
  if (name == "replace") {
    PHOTON_ASSIGN_OR_RETURN(Value m, string_method(v.to_output(), "replace"));
    return (*std::get<std::shared_ptr<Callable>>(m.v))(a, kw);
  }
  if (name == "default" || name == "d") {
    const Value fallback = kwarg(kw, "default_value", a, 0, Value(""));
    const bool boolean = kwarg(kw, "boolean", a, 1, Value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
    return v;
  }
  if (name == "join") {
    if (!v.is_list()) return error_at(e, "join needs a list");
    const std::string sep = a.empty() ? "" : a[0].to_output();
    std::string out;
    for (size_t i = 0; i < v.list().size(); ++i) out += (i ? sep : "") + v.list()[i].to_output();
    return Value(std::move(out));
  }
  if (name == "first" || name == "last") {
    if (v.is_list()) {
      if (v.list().empty()) return Value::undefined();
      return name == "first" ? v.list().front() : v.list().back();
    }
    if (v.is_string() && !v.str().empty()) {
      const auto chars = characters(v.str());
      return Value(name == "first" ? chars.front() : chars.back());
    }
    return Value::undefined();
  }
  if (name == "list") {
    if (v.is_list()) return v;
    List out;
    if (v.is_string()) {
      for (auto& c : characters(v.str())) out.emplace_back(std::move(c));
    } else if (v.is_dict()) {
      for (const auto& [k, x] : v.dict().items) out.emplace_back(k);
    }
    return Value(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto chars = characters(v.str());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value(std::move(out));
    }
    if (v.is_list()) return Value(List(v.list().rbegin(), v.list().rend()));
    return error_at(e, "reverse needs a string or list");
  }
  if (name == "int") {
    if (v.is_number()) return Value(static_cast<int64_t>(v.number()));
    if (v.is_string()) {
      try {
        return Value(static_cast<int64_t>(std::stoll(v.str())));
      } catch (...) {
        return Value(int64_t{0});
      }
    }
    return Value(int64_t{0});
  }
  if (name == "float") return Value(v.is_number() ? v.number() : 0.0);
  if (name == "abs")
    return v.is_int() ? Value(static_cast<int64_t>(std::llabs(std::get<int64_t>(v.v)))) : Value(std::fabs(v.number()));
  if (name == "safe" || name == "e" || name == "escape") return v;
  if (name == "items") {
    if (!v.is_dict()) return error_at(e, "items needs a dict");
    List out;
    for (const auto& [k, x] : v.dict().items) out.push_back(Value(List{Value(k), x}));
    return Value(std::move(out));
  }
  if (name == "selectattr" || name == "rejectattr" || name == "map") {
    if (!v.is_list()) return error_at(e, fmt::format("{} needs a list", name));
    List out;
    if (name == "map") {
      const Value attr = kwarg(kw, "attribute", {}, 0, Value::undefined());
      if (!attr.is_string()) return error_at(e, "map supports attribute='...' only");
      for (const Value& item : v.list()) {
        PHOTON_ASSIGN_OR_RETURN(Value x, attribute(e, item, attr.str()));
        out.push_back(std::move(x));
      }
      return Value(std::move(out));
    }
    if (a.empty() || !a[0].is_string()) return error_at(e, fmt::format("{} needs an attribute name", name));
    for (const Value& item : v.list()) {
      PHOTON_ASSIGN_OR_RETURN(Value x, attribute(e, item, a[0].str()));
      bool ok = x.truthy();
      if (a.size() > 1) {
        Args rest(a.begin() + 2, a.end());
        PHOTON_ASSIGN_OR_RETURN(ok, apply_test(e, a[1].to_output(), x, rest));
      }
      if (ok == (name == "selectattr")) out.push_back(item);
    }
    return Value(std::move(out));
  }
  if (name == "indent") {
    const int64_t width = a.empty() || !a[0].is_int() ? 4 : std::get<int64_t>(a[0].v);
    const bool first = kwarg(kw, "first", a, 1, Value(false)).truthy();
    const std::string pad(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
    std::string s = v.to_output(), out;
    for (size_t i = 0; i < s.size(); ++i) {
      out += s[i];
      if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') out += pad;
    }
    return Value(first ? pad + out : out);
  }
  return error_at(e, fmt::format("unsupported filter '{}'", name));
}

Result<bool> apply_test(const Expr& e, const std::string& name, const Value& v, const Args& a) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && std::get<bool>(v.v);
  if (name == "false") return v.is_bool() && !std::get<bool>(v.v);
  if (name == "mapping") return v.is_dict();
  if (name == "sequence") return v.is_list() || v.is_string();
  if (name == "iterable") return v.is_list() || v.is_string() || v.is_dict();
  if (name == "callable") return v.is_callable();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) return error_at(e, fmt::format("'{}' needs an integer", name));
    return (std::get<int64_t>(v.v) % 2 != 0) == (name == "odd");
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") {
    if (a.empty()) return error_at(e, fmt::format("'{}' needs an argument", name));
    return v.equals(a[0]);
  }
  if (name == "ne" || name == "!=") return a.empty() ? false : !v.equals(a[0]);
  if (name == "in") {
    if (a.empty()) return error_at(e, "'in' needs an argument");
    if (a[0].is_list())
      return std::any_of(a[0].list().begin(), a[0].list().end(), [&](const Value& x) { return x.equals(v); });
    if (a[0].is_string() && v.is_string()) return a[0].str().find(v.str()) != std::string::npos;
    if (a[0].is_dict() && v.is_string()) return a[0].dict().find(v.str()) != nullptr;
    return false;
  }
  return error_at(e, fmt::format("unsupported test '{}'", name));
}

void add_globals(std::unordered_map<std::string, Value>& g) {
  g["raise_exception"] = Value(Callable([](Args& a, Kwargs&) -> Result<Value> {
    // kCancelled marks "the template's own message": the renderer reports it verbatim.
    return Status(StatusCode::kCancelled, a.empty() ? "raise_exception() called" : a[0].to_output());
  }));
  g["strftime_now"] = Value(Callable([](Args& a, Kwargs&) -> Result<Value> {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const std::string format = a.empty() ? "%Y-%m-%d" : a[0].to_output();
    const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
    return Value(std::string(buf, n));
  }));
  g["range"] = Value(Callable([](Args& a, Kwargs&) -> Result<Value> {
    int64_t start = 0, stop = 0, step = 1;
    for (const Value& x : a) {
      if (!x.is_int()) return Status(StatusCode::kInvalidArgument, "range() takes integers");
    }
    if (a.size() == 1) stop = std::get<int64_t>(a[0].v);
    if (a.size() >= 2) {
      start = std::get<int64_t>(a[0].v);
      stop = std::get<int64_t>(a[1].v);
    }
    if (a.size() >= 3) step = std::get<int64_t>(a[2].v);
    if (step == 0) return Status(StatusCode::kInvalidArgument, "range() step cannot be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      out.emplace_back(i);
      if (out.size() > 1000000) return Status(StatusCode::kInvalidArgument, "range() is too long");
    }
    return Value(std::move(out));
  }));
  g["namespace"] = Value(Callable([](Args&, Kwargs& kw) -> Result<Value> {
    Dict d;
    for (auto& [k, v] : kw) d.set(k, v);
    Value ns(std::move(d));
    ns.is_namespace = true;
    return ns;
  }));
  g["dict"] = Value(Callable([](Args&, Kwargs& kw) -> Result<Value> {
    Dict d;
    for (auto& [k, v] : kw) d.set(k, v);
    return Value(std::move(d));
  }));
}

}  // namespace photon::jinja
