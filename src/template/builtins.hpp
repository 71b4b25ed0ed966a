// The library a chat template calls, with Python's and Jinja2's meanings: attributes and methods of strings, lists
// and dicts, the filters and tests chat templates use, and the globals (raise_exception, strftime_now, range,
// namespace, dict). The renderer (render.cpp) evaluates the template's expressions and calls these. Errors carry the
// failing expression's line and column.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "template/ast.hpp"

namespace photon::jinja {

using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

/// kInvalidArgument with "template line L, column C: message" at e.
Status error_at(const Expr& e, const std::string& message);
/// Jinja's name for v's type ("string", "list", ...), for messages.
std::string type_name(const Value& v);
/// A string's characters (Python indexes, slices and counts code points, not bytes): each a UTF-8 sequence.
std::vector<std::string> characters(const std::string& s);

/// Python's ordering of two numbers or two strings (< 0, 0, > 0), for comparisons, sort, min and max; Jinja's
/// filters fold strings to lower case unless case_sensitive. Other pairs are an error.
Result<int> compare(const Value& a, const Value& b, bool case_sensitive);
/// obj.name: a dict's key, else a method of a string, list or dict (a Callable bound to obj), else undefined; an
/// error when obj itself is undefined.
Result<Value> attribute(const Expr& e, const Value& obj, const std::string& name);
/// v | name(a..., kw...). An unsupported filter is an error naming it.
Result<Value> apply_filter(const Expr& e, const std::string& name, Value v, Args& a, Kwargs& kw);
/// v is name(a...). An unsupported test is an error naming it.
Result<bool> apply_test(const Expr& e, const std::string& name, const Value& v, const Args& a);
/// Python's printf-style formatting, format % args (and Jinja's `format` filter), as Python prints it: %s %r %a %d
/// %i %u %o %x %X %e %E %f %F %g %G and %%, with flags, width and precision; %(name)s, * widths and %c are errors,
/// as are too few or too many arguments and a non-number for a numeric conversion.
Result<std::string> percent_format(const std::string& format, const Args& args);
/// Adds the global functions every chat template may call to `globals`.
void add_globals(std::unordered_map<std::string, Value>& globals);

}  // namespace photon::jinja
