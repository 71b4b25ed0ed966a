#include "tokenizer/byte_level.hpp"

#include <array>

#include "tokenizer/utf8.hpp"

namespace photon::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8{};
  Tables() {
    // Printable Latin-1 bytes map to themselves; the others to U+0100 onwards, in byte order.
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      to_char[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
      utf8::append(to_utf8[static_cast<size_t>(b)], to_char[static_cast<size_t>(b)]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return tables().to_char[b]; }

int char_to_byte(char32_t c) {
  if (c < 256) {
    const bool printable = (c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff);
    if (printable) return static_cast<int>(c);
    return -1;
  }
  if (c >= 256 && c < 256 + 68) {
    // The 68 non-printable bytes, in order: 0x00-0x20, 0x7f-0xa0, 0xad.
    const int k = static_cast<int>(c - 256);
    if (k <= 0x20) return k;
    if (k <= 0x20 + 34) return 0x7f + (k - 0x21);
    return 0xad;
  }
  return -1;
}

std::string encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.to_utf8[static_cast<unsigned char>(c)];
  return out;
}

void decode_append(std::string_view text, std::string& out) {
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const char32_t cp = utf8::decode(text, i);
    const int b = char_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(start, i - start));
    }
  }
}

}  // namespace photon::byte_level
