#include "tokenizer/json_scan.hpp"

#include "tokenizer/utf8.hpp"

namespace photon::json_scan {
namespace {

constexpr size_t npos = std::string_view::npos;

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool read_hex4(std::string_view s, size_t pos, char32_t* v) {
  if (pos + 4 > s.size()) return false;
  char32_t r = 0;
  for (size_t i = 0; i < 4; ++i) {
    const int h = hex(s[pos + i]);
    if (h < 0) return false;
    r = (r << 4) | static_cast<char32_t>(h);
  }
  *v = r;
  return true;
}

}  // namespace

size_t skip_ws(std::string_view s, size_t pos) {
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\n' || s[pos] == '\r' || s[pos] == '\t')) ++pos;
  return pos;
}

size_t read_string(std::string_view s, size_t pos, std::string& out) {
  out.clear();
  if (pos >= s.size() || s[pos] != '"') return npos;
  ++pos;
  while (pos < s.size()) {
    // Copy the run up to the next quote or backslash in one go.
    size_t run = pos;
    while (run < s.size() && s[run] != '"' && s[run] != '\\') ++run;
    out.append(s.substr(pos, run - pos));
    pos = run;
    if (pos >= s.size()) return npos;
    if (s[pos] == '"') return pos + 1;
    if (++pos >= s.size()) return npos;  // backslash
    switch (s[pos]) {
      case '"':
        out.push_back('"');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '/':
        out.push_back('/');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'u': {
        char32_t cp = 0;
        if (!read_hex4(s, pos + 1, &cp)) return npos;
        pos += 4;
        if (cp >= 0xd800 && cp <= 0xdbff && pos + 6 < s.size() && s[pos + 1] == '\\' && s[pos + 2] == 'u') {
          char32_t lo = 0;
          if (read_hex4(s, pos + 3, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            pos += 6;
          }
        }
        if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;  // a lone surrogate
        utf8::append(out, cp);
        break;
      }
      default:
        return npos;
    }
    ++pos;
  }
  return npos;
}

size_t skip_value(std::string_view s, size_t pos) {
  pos = skip_ws(s, pos);
  if (pos >= s.size()) return npos;
  const char c = s[pos];
  if (c == '"') {
    ++pos;
    while (pos < s.size()) {
      if (s[pos] == '\\') {
        pos += 2;
      } else if (s[pos] == '"') {
        return pos + 1;
      } else {
        ++pos;
      }
    }
    return npos;
  }
  if (c == '{' || c == '[') {
    // Nesting depth by brackets, skipping strings; the parser proper validates what it reads later.
    int depth = 0;
    while (pos < s.size()) {
      const char d = s[pos];
      if (d == '"') {
        pos = skip_value(s, pos);
        if (pos == npos) return npos;
        continue;
      }
      if (d == '{' || d == '[') ++depth;
      if (d == '}' || d == ']') {
        if (--depth == 0) return pos + 1;
      }
      ++pos;
    }
    return npos;
  }
  // A number, true, false or null: up to the next delimiter.
  while (pos < s.size() && s[pos] != ',' && s[pos] != '}' && s[pos] != ']' && s[pos] != ' ' && s[pos] != '\n' &&
         s[pos] != '\r' && s[pos] != '\t') {
    ++pos;
  }
  return pos;
}

bool find_member(std::string_view s, size_t pos, std::string_view key, size_t* begin, size_t* end) {
  pos = skip_ws(s, pos);
  if (pos >= s.size() || s[pos] != '{') return false;
  pos = skip_ws(s, pos + 1);
  std::string name;
  while (pos < s.size() && s[pos] != '}') {
    pos = read_string(s, pos, name);
    if (pos == npos) return false;
    pos = skip_ws(s, pos);
    if (pos >= s.size() || s[pos] != ':') return false;
    const size_t value = skip_ws(s, pos + 1);
    const size_t after = skip_value(s, value);
    if (after == npos) return false;
    if (name == key) {
      *begin = value;
      *end = after;
      return true;
    }
    pos = skip_ws(s, after);
    if (pos < s.size() && s[pos] == ',') pos = skip_ws(s, pos + 1);
  }
  return false;
}

}  // namespace photon::json_scan
