#include "template/value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tokenizer/utf8.hpp"

namespace photon::jinja {
namespace {

// Python's repr() of a float: shortest round-trip digits, fixed notation for exponents in [-4, 16), else
// scientific with at least two exponent digits; integral values keep a ".0".
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+17"
  const size_t e = sci.find('e');
  int exponent = std::stoi(sci.substr(e + 1));
  std::string mantissa = sci.substr(0, e);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out =
          digits.substr(0, static_cast<size_t>(exponent) + 1) + "." + digits.substr(static_cast<size_t>(exponent) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  return negative ? "-" + out : out;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

void json_string(const std::string& s, bool ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (ascii && c >= 0x7f) {  // json.dumps(ensure_ascii=True): DEL and every non-ASCII character as \uXXXX
      size_t at = i;
      const char32_t cp = utf8::decode(s, at);
      i = at - 1;
      if (cp > 0xFFFF) {
        const char32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
      }
      continue;
    }
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
        if (c < 0x20) {  // json.dumps(ensure_ascii=False) escapes only these; DEL is kept as is
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

Status json_value(const Value& v, const JsonStyle& style, int depth, std::string& out) {
  const int indent = style.indent;
  // Python's defaults: ", " and ": ", or "," between items under an indent.
  std::string_view item_sep = indent < 0 ? ", " : ",", key_sep = ": ";
  if (!style.item_separator.empty()) item_sep = style.item_separator;
  if (!style.key_separator.empty()) key_sep = style.key_separator;
  if (depth > 200) return Status(StatusCode::kInvalidArgument, "tojson: value nested too deeply");
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(d), ' ');
  };
  if (v.is_none() || v.is_undefined()) {
    out += "null";
  } else if (v.is_bool()) {
    out += std::get<bool>(v.v) ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(std::get<int64_t>(v.v));
  } else if (v.is_float()) {
    const double d = std::get<double>(v.v);
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
  } else if (v.is_string()) {
    json_string(v.str(), style.ensure_ascii, out);
  } else if (v.is_list()) {
    const List& l = v.list();
    if (l.empty()) {
      out += "[]";
      return Status::ok();
    }
    out += '[';
    for (size_t i = 0; i < l.size(); ++i) {
      if (i > 0) out += item_sep;
      newline(depth + 1);
      PHOTON_RETURN_IF_ERROR(json_value(l[i], style, depth + 1, out));
    }
    newline(depth);
    out += ']';
  } else if (v.is_dict()) {
    const Dict& d = v.dict();
    if (d.items.empty()) {
      out += "{}";
      return Status::ok();
    }
    // sort_keys: Python sorts str keys by code point, which is UTF-8's byte order.
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& item : d.items) items.push_back(&item);
    if (style.sort_keys)
      std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += item_sep;
      newline(depth + 1);
      json_string(items[i]->first, style.ensure_ascii, out);
      out += key_sep;
      PHOTON_RETURN_IF_ERROR(json_value(items[i]->second, style, depth + 1, out));
    }
    newline(depth);
    out += '}';
  } else {
    return Status(StatusCode::kInvalidArgument, "tojson: a function cannot be serialised");
  }
  return Status::ok();
}

}  // namespace

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value v) {
  if (Value* existing = find(key)) {
    *existing = std::move(v);
  } else {
    items.emplace_back(std::move(key), std::move(v));
  }
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return std::get<bool>(v);
  if (is_int()) return std::get<int64_t>(v) != 0;
  if (is_float()) return std::get<double>(v) != 0.0;
  if (is_string()) return !str().empty();
  if (is_list()) return !list().empty();
  if (is_dict()) return !dict().items.empty();
  return true;
}

std::string Value::to_output() const {
  if (is_undefined()) return "";
  if (is_string()) return str();
  return repr();
}

std::string Value::repr() const {
  if (is_undefined()) return "";
  if (is_none()) return "None";
  if (is_bool()) return std::get<bool>(v) ? "True" : "False";
  if (is_int()) return std::to_string(std::get<int64_t>(v));
  if (is_float()) return float_repr(std::get<double>(v));
  if (is_string()) return string_repr(str());
  if (is_list()) {
    std::string out = "[";
    for (size_t i = 0; i < list().size(); ++i) out += (i ? ", " : "") + list()[i].repr();
    return out + "]";
  }
  if (is_dict()) {
    if (is_namespace) return "<Namespace>";
    std::string out = "{";
    for (size_t i = 0; i < dict().items.size(); ++i) {
      out += (i ? ", " : "") + string_repr(dict().items[i].first) + ": " + dict().items[i].second.repr();
    }
    return out + "}";
  }
  return "<function>";
}

bool Value::equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (is_int() && o.is_int()) return std::get<int64_t>(v) == std::get<int64_t>(o.v);
    return number() == o.number();
  }
  if (is_bool() && o.is_bool()) return std::get<bool>(v) == std::get<bool>(o.v);
  if (is_string() && o.is_string()) return str() == o.str();
  if ((is_none() || is_undefined()) && (o.is_none() || o.is_undefined())) return is_none() == o.is_none();
  if (is_list() && o.is_list()) {
    if (list().size() != o.list().size()) return false;
    for (size_t i = 0; i < list().size(); ++i) {
      if (!list()[i].equals(o.list()[i])) return false;
    }
    return true;
  }
  if (is_dict() && o.is_dict()) {
    if (dict().items.size() != o.dict().items.size()) return false;
    for (const auto& [k, val] : dict().items) {
      const Value* other = o.dict().find(k);
      if (other == nullptr || !val.equals(*other)) return false;
    }
    return true;
  }
  return false;
}

Result<std::string> to_json(const Value& value, const JsonStyle& style) {
  std::string out;
  PHOTON_RETURN_IF_ERROR(json_value(value, style, 0, out));
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& x : j) l.push_back(from_json(x));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), from_json(*it));
      return Value(std::move(d));
    }
    default:
      return Value::none();
  }
}

}  // namespace photon::jinja
