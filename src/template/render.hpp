// Renders a parsed template against variables, with the filters, tests, methods and globals chat templates use.
#pragma once

#include <string>
#include <unordered_map>

#include "template/ast.hpp"

namespace photon::jinja {

/// Renders `body` with `variables` as the global scope. Errors carry the line and column of the failing
/// expression; `raise_exception(msg)` in a template becomes an error whose message is `msg`.
Result<std::string> render(const Body& body, const std::unordered_map<std::string, Value>& variables);

}  // namespace photon::jinja
