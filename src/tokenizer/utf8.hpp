// UTF-8 helpers for the tokenizer: decoding code points, repairing invalid input, finding complete prefixes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace photon::utf8 {

/// Length in bytes of the sequence a lead byte starts (1 for invalid leads, so scanning always advances).
inline size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xe) return 3;
  if ((lead >> 3) == 0x1e) return 4;
  return 1;
}

/// Decodes the code point at s[i] (advancing i); invalid or truncated sequences yield U+FFFD and one byte.
char32_t decode(std::string_view s, size_t& i);
/// Appends the UTF-8 encoding of `cp`.
void append(std::string& out, char32_t cp);
/// True when `s` is entirely valid UTF-8 (no overlongs, surrogates or values past U+10FFFF).
bool is_valid(std::string_view s);
/// `s` with every invalid sequence replaced by U+FFFD (as Rust's String::from_utf8_lossy does).
std::string repair(std::string_view s);
/// The longest prefix of `s` that ends on a character boundary, assuming the rest may still be arriving: an
/// incomplete sequence at the end is held back; invalid bytes elsewhere are not.
size_t complete_prefix(std::string_view s);

}  // namespace photon::utf8
