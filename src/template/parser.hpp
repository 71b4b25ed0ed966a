// Parses template text into a syntax tree, applying Jinja2's whitespace rules as transformers configures them
// (trim_blocks, lstrip_blocks, and the `-` markers). Unsupported syntax is an error with line and column.
#pragma once

#include <string_view>

#include "template/ast.hpp"

namespace photon::jinja {

Result<Body> parse(std::string_view source);

}  // namespace photon::jinja
