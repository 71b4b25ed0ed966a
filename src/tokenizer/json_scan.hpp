// A minimal JSON scanner for the two huge members of tokenizer.json (model.vocab and model.merges): finding their
// byte ranges and reading their strings directly is several times faster than building a DOM for the whole file,
// which keeps loading a 9 MB tokenizer well under 300 ms. Everything else still goes through nlohmann::json.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace photon::json_scan {

/// Skips whitespace from `pos`.
size_t skip_ws(std::string_view s, size_t pos);
/// Reads the JSON string starting at s[pos] (which must be '"'), unescaping it into `out`. Returns the position
/// after the closing quote, or npos when the string is malformed.
size_t read_string(std::string_view s, size_t pos, std::string& out);
/// Returns the position after the JSON value starting at s[pos], or npos when it is malformed.
size_t skip_value(std::string_view s, size_t pos);
/// Finds the value of member `key` of the object that starts at s[pos] ('{'): sets [*begin, *end) to its byte range.
/// False when the object has no such member or is malformed.
bool find_member(std::string_view s, size_t pos, std::string_view key, size_t* begin, size_t* end);

}  // namespace photon::json_scan
