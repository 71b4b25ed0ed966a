#include "template/builtins.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
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
    return Value(Callable([s](Args& a, Kwargs& kw) -> Result<Value> {
      if (a.size() < 2) return Status(StatusCode::kInvalidArgument, "replace() needs two arguments");
      const std::string from = a[0].to_output(), to = a[1].to_output();
      const Value count = kwarg(kw, "count", a, 2, Value(int64_t{-1}));
      if (!count.is_int()) return Status(StatusCode::kInvalidArgument, "replace(): count must be an integer");
      int64_t left = std::get<int64_t>(count.v);  // negative: every occurrence
      if (from.empty()) return Value(s);
      std::string out;
      size_t pos = 0;
      for (size_t hit = 0; left != 0 && (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
        out.append(s, pos, hit - pos).append(to);
        --left;
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

Result<std::string> percent_format(const std::string& format, const Args& args) {
  const auto fail = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, m); };
  std::string out;
  size_t next = 0;  // the next argument
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    // %[flags][width][.precision]type
    std::string flags;
    size_t j = i + 1;
    while (j < format.size() && std::string_view("-+ 0#").find(format[j]) != std::string_view::npos)
      flags += format[j++];
    int width = 0, precision = -1;
    while (j < format.size() && std::isdigit(static_cast<unsigned char>(format[j])) && width < 10000) {
      width = width * 10 + (format[j++] - '0');
    }
    if (j < format.size() && format[j] == '.') {
      precision = 0;
      for (++j; j < format.size() && std::isdigit(static_cast<unsigned char>(format[j])) && precision < 10000; ++j) {
        precision = precision * 10 + (format[j] - '0');
      }
    }
    if (j >= format.size()) return fail("incomplete format: '%' at the end of the string");
    const char type = format[j];
    i = j;
    if (type == '%') {
      out += '%';
      continue;
    }
    if (type == '(' || type == '*') return fail(fmt::format("%{} in a format string is not supported", type));
    if (next >= args.size()) return fail("not enough arguments for format string");
    const Value& arg = args[next++];
    std::string text;
    if (type == 's' || type == 'r' || type == 'a') {
      text = type == 's' ? arg.to_output() : arg.repr();
      if (precision >= 0) {
        const auto chars = characters(text);
        if (chars.size() > static_cast<size_t>(precision)) {
          text.clear();
          for (int k = 0; k < precision; ++k) text += chars[static_cast<size_t>(k)];
        }
      }
    } else if (std::string_view("diouxXeEfFgGc").find(type) != std::string_view::npos) {
      if (!arg.is_number()) {
        return fail(fmt::format("%{} format: a number is required, not {}", type, type_name(arg)));
      }
      if (type == 'c') return fail("%c in a format string is not supported");
      if (std::string_view("diouxX").find(type) != std::string_view::npos) {
        // Integers as Python formats them: precision is a minimum digit count, '#' adds 0x / 0o, '0' pads after
        // the sign and prefix. %d truncates a float exactly (as int() does); %x and %o refuse one.
        const bool decimal = type == 'd' || type == 'i' || type == 'u';
        if (!decimal && !arg.is_int()) {
          return fail(fmt::format("%{} format: an integer is required, not {}", type, type_name(arg)));
        }
        bool negative = false;
        std::string digits;
        if (arg.is_int()) {
          const int64_t x = std::get<int64_t>(arg.v);
          negative = x < 0;
          const uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
          digits = type == 'o'   ? fmt::format("{:o}", magnitude)
                   : type == 'x' ? fmt::format("{:x}", magnitude)
                   : type == 'X' ? fmt::format("{:X}", magnitude)
                                 : fmt::format("{}", magnitude);
        } else {
          const double x = std::trunc(arg.number());
          if (!std::isfinite(x)) return fail(fmt::format("%{} format: cannot convert {} to an integer", type, x));
          negative = x < 0;
          digits = fmt::format("{:.0f}", std::fabs(x));
        }
        if (precision > 0 && digits.size() < static_cast<size_t>(precision)) {
          digits.insert(0, static_cast<size_t>(precision) - digits.size(), '0');
        }
        std::string head = negative                               ? "-"
                           : flags.find('+') != std::string::npos ? "+"
                           : flags.find(' ') != std::string::npos ? " "
                                                                  : "";
        if (flags.find('#') != std::string::npos && !decimal) head += type == 'o' ? "0o" : type == 'x' ? "0x" : "0X";
        const size_t length = head.size() + digits.size();
        const size_t fill = width > 0 && static_cast<size_t>(width) > length ? static_cast<size_t>(width) - length : 0;
        if (flags.find('-') != std::string::npos) {
          out.append(head).append(digits).append(fill, ' ');
        } else if (flags.find('0') != std::string::npos) {
          out.append(head).append(fill, '0').append(digits);
        } else {
          out.append(fill, ' ').append(head).append(digits);
        }
        continue;
      }
      std::string spec = fmt::format("%{}", flags);
      if (width > 0) spec += fmt::format("{}", width);
      if (precision >= 0) spec += fmt::format(".{}", precision);
      spec += type;
      char buf[512];
      const int n = std::snprintf(buf, sizeof buf, spec.c_str(), arg.number());
      if (n < 0 || static_cast<size_t>(n) >= sizeof buf) return fail("a formatted number is too long");
      out.append(buf, static_cast<size_t>(n));
      continue;
    } else {
      return fail(fmt::format("unsupported format character '{}'", type));
    }
    const size_t length = characters(text).size();
    const std::string pad(width > 0 && static_cast<size_t>(width) > length ? static_cast<size_t>(width) - length : 0,
                          ' ');
    out += flags.find('-') != std::string::npos ? text + pad : pad + text;
  }
  if (next < args.size()) return fail("not all arguments converted during string formatting");
  return out;
}

Result<int> compare(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_number() && b.is_number()) return a.number() < b.number() ? -1 : (a.number() > b.number() ? 1 : 0);
  if (a.is_string() && b.is_string()) {
    if (case_sensitive) return a.str().compare(b.str());
    std::string x = a.str(), y = b.str();
    for (char& c : x) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (char& c : y) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return x.compare(y);
  }
  return Status(StatusCode::kInvalidArgument, fmt::format("cannot order {} and {} values", type_name(a), type_name(b)));
}

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
  if (name == "tojson") {  // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    JsonStyle style;
    style.ensure_ascii = kwarg(kw, "ensure_ascii", a, 0, Value(false)).truthy();
    const Value indent = kwarg(kw, "indent", a, 1, Value::none());
    if (!indent.is_none() && !indent.is_int()) return error_at(e, "tojson: indent must be an integer or none");
    if (indent.is_int()) style.indent = static_cast<int>(std::clamp<int64_t>(std::get<int64_t>(indent.v), 0, 64));
    const Value separators = kwarg(kw, "separators", a, 2, Value::none());
    if (!separators.is_none()) {
      if (!separators.is_list() || separators.list().size() != 2 || !separators.list()[0].is_string() ||
          !separators.list()[1].is_string()) {
        return error_at(e, "tojson: separators must be a pair of strings, e.g. (',', ':')");
      }
      style.item_separator = separators.list()[0].str();
      style.key_separator = separators.list()[1].str();
    }
    style.sort_keys = kwarg(kw, "sort_keys", a, 3, Value(false)).truthy();
    auto json = to_json(v, style);
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
  if (name == "unique" || name == "min" || name == "max" || name == "sum" || name == "dictsort") {
    const bool dictsort = name == "dictsort";
    if (dictsort ? !v.is_dict() : !v.is_list()) {
      return error_at(e, fmt::format("{} needs a {}, not a {}", name, dictsort ? "dict" : "list", type_name(v)));
    }
    const bool case_sensitive = kwarg(kw, "case_sensitive", a, 0, Value(false)).truthy();
    if (dictsort) {  // dictsort(case_sensitive=False, by='key', reverse=False): the (key, value) pairs
      const Value by = kwarg(kw, "by", a, 1, Value("key"));
      if (!by.is_string() || (by.str() != "key" && by.str() != "value")) {
        return error_at(e, "dictsort: by must be 'key' or 'value'");
      }
      const size_t at = by.str() == "key" ? 0 : 1;
      const bool reverse = kwarg(kw, "reverse", a, 2, Value(false)).truthy();
      List pairs;
      for (const auto& [k, x] : v.dict().items) pairs.push_back(Value(List{Value(k), x}));
      Status failed;
      std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& l, const Value& r) {
        auto c = compare(l.list()[at], r.list()[at], case_sensitive);
        if (!c) failed = c.status();
        return c.is_ok() && (reverse ? *c > 0 : *c < 0);
      });
      if (!failed) return error_at(e, fmt::format("dictsort: {}", failed.message()));
      return Value(std::move(pairs));
    }
    const Value attr = kwarg(kw, "attribute", {}, 0, Value::none());
    List items;
    for (const Value& item : v.list()) {
      if (attr.is_none()) {
        items.push_back(item);
      } else {
        PHOTON_ASSIGN_OR_RETURN(Value x, attribute(e, item, attr.to_output()));
        items.push_back(std::move(x));
      }
    }
    if (name == "sum") {  // sum(attribute=None, start=0)
      Value total = kwarg(kw, "start", a, 1, Value(int64_t{0}));
      for (const Value& x : items) {
        if (!x.is_number() || !total.is_number()) return error_at(e, fmt::format("sum of a {}", type_name(x)));
        total = total.is_int() && x.is_int() ? Value(std::get<int64_t>(total.v) + std::get<int64_t>(x.v))
                                             : Value(total.number() + x.number());
      }
      return total;
    }
    if (name == "unique") {  // the first of each, in order
      List out, seen;
      for (size_t i = 0; i < items.size(); ++i) {
        bool dup = false;
        for (const Value& s2 : seen) {
          if (items[i].is_string() && s2.is_string() ? compare(items[i], s2, case_sensitive).value() == 0
                                                     : items[i].equals(s2)) {
            dup = true;
            break;
          }
        }
        if (dup) continue;
        seen.push_back(items[i]);
        out.push_back(v.list()[i]);
      }
      return Value(std::move(out));
    }
    if (items.empty()) return Value::undefined();  // min / max of nothing
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      auto c = compare(items[i], items[best], case_sensitive);
      if (!c) return error_at(e, fmt::format("{}: {}", name, c.status().message()));
      if (name == "min" ? *c < 0 : *c > 0) best = i;
    }
    return v.list()[best];
  }
  if (name == "round") {  // round(precision=0, method='common'|'ceil'|'floor'), always a float; common: Python's round
    if (!v.is_number()) return error_at(e, fmt::format("round needs a number, not a {}", type_name(v)));
    const Value precision = kwarg(kw, "precision", a, 0, Value(int64_t{0}));
    const Value method = kwarg(kw, "method", a, 1, Value("common"));
    if (!precision.is_int()) return error_at(e, "round: precision must be an integer");
    const double scale = std::pow(10.0, static_cast<double>(std::get<int64_t>(precision.v)));
    const double x = v.number() * scale;
    const std::string m = method.to_output();
    if (m != "common" && m != "ceil" && m != "floor") return error_at(e, "round: method must be common, ceil or floor");
    const double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::nearbyint(x);  // ties to even
    return Value(r / scale);
  }
  if (name == "format") {
    if (!v.is_string()) return error_at(e, fmt::format("format needs a format string, not a {}", type_name(v)));
    if (!kw.empty()) return error_at(e, "format: named arguments (%(name)s) are not supported");
    auto text = percent_format(v.str(), a);
    if (!text) return error_at(e, text.status().message());
    return Value(std::move(*text));
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
  if (name == "lower" ||
      name == "upper") {  // str.islower() / str.isupper(): a cased letter, and none of the other case
    if (!v.is_string()) return false;
    bool cased = false;
    for (const char ch : v.str()) {
      const auto c = static_cast<unsigned char>(ch);
      if (name == "lower" ? std::isupper(c) : std::islower(c)) return false;
      cased = cased || std::isalpha(c);
    }
    return cased;
  }
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
