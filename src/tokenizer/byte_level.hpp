// The GPT-2 byte-level alphabet: every byte maps to a printable code point, so any byte string becomes a string
// of "visible" characters that BPE can work on, and back.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace photon::byte_level {

/// The code point that stands for byte `b`.
char32_t byte_to_char(uint8_t b);
/// The byte a code point stands for, or -1 when it is not part of the alphabet.
int char_to_byte(char32_t c);
/// Maps every byte of `bytes` to its code point, UTF-8 encoded.
std::string encode(std::string_view bytes);
/// Appends the bytes that the characters of `text` stand for; characters outside the alphabet are copied as-is.
void decode_append(std::string_view text, std::string& out);

}  // namespace photon::byte_level
