#include "tokenizer/utf8.hpp"

namespace photon::utf8 {
namespace {

constexpr char32_t kReplacement = 0xfffd;

// Decodes one valid sequence at s[i]; returns its length, or 0 when the bytes there are not valid UTF-8.
size_t valid_length(std::string_view s, size_t i, char32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t n = sequence_length(b0);
  if (n == 1) {
    if (b0 >= 0x80) return 0;
    *cp = b0;
    return 1;
  }
  if (i + n > s.size()) return 0;
  char32_t c = b0 & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xc0) != 0x80) return 0;
    c = (c << 6) | (b & 0x3f);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[n] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  *cp = c;
  return n;
}

}  // namespace

char32_t decode(std::string_view s, size_t& i) {
  char32_t cp = 0;
  const size_t n = valid_length(s, i, &cp);
  if (n == 0) {
    ++i;
    return kReplacement;
  }
  i += n;
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

bool is_valid(std::string_view s) {
  char32_t cp = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = valid_length(s, i, &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string repair(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  char32_t cp = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = valid_length(s, i, &cp);
    if (n == 0) {
      append(out, kReplacement);
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

size_t complete_prefix(std::string_view s) {
  // Look back at most 3 bytes for the lead byte of a sequence that the end of `s` cuts short.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xc0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = sequence_length(b);
    if (b >= 0xc0 && need > back) return n - back;  // a lead whose sequence is not complete yet
    return n;
  }
  return n;
}

}  // namespace photon::utf8
