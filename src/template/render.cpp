#include "template/render.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

namespace photon::jinja {
namespace {

using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

Status error_at(const Expr& e, const std::string& message) {
  return Status(StatusCode::kInvalidArgument,
                fmt::format("template line {}, column {}: {}", e.line, e.column, message));
}

std::string type_name(const Value& v) {
  if (v.is_undefined()) return "undefined";
  if (v.is_none()) return "none";
  if (v.is_bool()) return "bool";
  if (v.is_int()) return "int";
  if (v.is_float()) return "float";
  if (v.is_string()) return "string";
  if (v.is_list()) return "list";
  if (v.is_dict()) return "dict";
  return "function";
}

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && chars.find(s[b]) != std::string::npos) ++b;
  if (right)
    while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

const std::string kWhitespace = " \t\n\r\f\v";

// A string's characters (Python indexes, slices and counts code points, not bytes).
std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    size_t n = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

Value kwarg(const Kwargs& kwargs, std::string_view name, const Args& args, size_t position, const Value& fallback) {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  return position < args.size() ? args[position] : fallback;
}

// Python-style sequence index, negative from the end.
bool normalise_index(int64_t& i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  return i >= 0 && i < static_cast<int64_t>(n);
}

class Renderer {
 public:
  explicit Renderer(const std::unordered_map<std::string, Value>& globals) { scopes_.push_back(globals); }

  // Limits that keep a hostile template from hanging or exhausting memory: work done, output size, call depth.
  static constexpr int64_t kMaxSteps = 20'000'000;
  static constexpr size_t kMaxOutput = size_t{64} << 20;
  static constexpr int kMaxCallDepth = 64;

  Status render(const Body& body, std::string& out) {
    for (const NodePtr& n : body) {
      if (++steps_ > kMaxSteps) return Status(StatusCode::kResourceExhausted, "the template does too much work");
      if (out.size() > kMaxOutput) return Status(StatusCode::kResourceExhausted, "the template output is too large");
      PHOTON_RETURN_IF_ERROR(render_node(*n, out));
      if (break_ || continue_) return Status::ok();
    }
    return Status::ok();
  }

 private:
  Status render_node(const Node& n, std::string& out) {
    switch (n.kind) {
      case Node::Kind::kText:
        out += n.text;
        return Status::ok();
      case Node::Kind::kOutput: {
        PHOTON_ASSIGN_OR_RETURN(Value v, eval(*n.expr));
        out += v.to_output();
        return Status::ok();
      }
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          bool take = true;
          if (cond) {
            PHOTON_ASSIGN_OR_RETURN(Value c, eval(*cond));
            take = c.truthy();
          }
          if (take) return render(body, out);
        }
        return Status::ok();
      case Node::Kind::kFor:
        return render_for(n, out);
      case Node::Kind::kSet: {
        PHOTON_ASSIGN_OR_RETURN(Value v, eval(*n.expr));
        return assign(n, std::move(v));
      }
      case Node::Kind::kSetBlock: {
        std::string captured;
        PHOTON_RETURN_IF_ERROR(render(n.body, captured));
        return assign(n, Value(std::move(captured)));
      }
      case Node::Kind::kBreak:
        break_ = true;
        return Status::ok();
      case Node::Kind::kContinue:
        continue_ = true;
        return Status::ok();
      case Node::Kind::kMacro: {
        const Node* macro = &n;
        scopes_.back()[n.text] = Value(Callable([this, macro](Args& args, Kwargs& kwargs) -> Result<Value> {
          if (call_depth_ >= kMaxCallDepth) {
            return Status(StatusCode::kResourceExhausted, "macros call each other too deeply");
          }
          std::unordered_map<std::string, Value> scope;
          for (size_t i = 0; i < macro->targets.size(); ++i) {
            Value v = Value::undefined(macro->targets[i]);
            if (i < args.size()) {
              v = args[i];
            } else if (macro->defaults[i]) {
              PHOTON_ASSIGN_OR_RETURN(v, eval(*macro->defaults[i]));
            }
            for (const auto& [k, kv] : kwargs) {
              if (k == macro->targets[i]) v = kv;
            }
            scope[macro->targets[i]] = std::move(v);
          }
          scopes_.push_back(std::move(scope));
          std::string out;
          ++call_depth_;
          const Status s = render(macro->body, out);
          --call_depth_;
          scopes_.pop_back();
          PHOTON_RETURN_IF_ERROR(s);
          return Value(std::move(out));
        }));
        return Status::ok();
      }
    }
    return Status(StatusCode::kInternal, "unknown template node");
  }

  Status assign(const Node& n, Value v) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = std::move(v);
      return Status::ok();
    }
    Value target = lookup(n.targets[0]);
    if (!target.is_dict() || !target.is_namespace) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("template line {}, column {}: only namespace() objects take attribute assignments "
                                "('{}' is {})",
                                n.line, n.column, n.targets[0], type_name(target)));
    }
    target.dict().set(n.targets[1], std::move(v));
    return Status::ok();
  }

  Status render_for(const Node& n, std::string& out) {
    PHOTON_ASSIGN_OR_RETURN(Value iterable, eval(*n.expr));
    List items;
    if (iterable.is_list()) {
      items = iterable.list();
    } else if (iterable.is_dict()) {
      for (const auto& [k, v] : iterable.dict().items) items.emplace_back(k);
    } else if (iterable.is_string()) {
      for (auto& c : characters(iterable.str())) items.emplace_back(std::move(c));
    } else if (!iterable.is_undefined() && !iterable.is_none()) {
      return error_at(*n.expr, fmt::format("cannot loop over a {}", type_name(iterable)));
    }
    // The inline `if` filters before loop.* is computed.
    if (n.cond) {
      List kept;
      for (Value& item : items) {
        scopes_.emplace_back();
        bind(n, item);
        auto c = eval(*n.cond);
        scopes_.pop_back();
        if (!c) return c.status();
        if (c->truthy()) kept.push_back(std::move(item));
      }
      items.swap(kept);
    }
    if (items.empty()) return render(n.else_body, out);
    for (size_t i = 0; i < items.size(); ++i) {
      if (++steps_ > kMaxSteps) return Status(StatusCode::kResourceExhausted, "the template does too much work");
      scopes_.emplace_back();
      bind(n, items[i]);
      Dict loop;
      const auto len = static_cast<int64_t>(items.size()), idx = static_cast<int64_t>(i);
      loop.set("index0", Value(idx));
      loop.set("index", Value(idx + 1));
      loop.set("revindex0", Value(len - idx - 1));
      loop.set("revindex", Value(len - idx));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i + 1 == items.size()));
      loop.set("length", Value(len));
      loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("previtem"));
      loop.set("nextitem", i + 1 < items.size() ? items[i + 1] : Value::undefined("nextitem"));
      scopes_.back()["loop"] = Value(std::move(loop));
      const Status s = render(n.body, out);
      scopes_.pop_back();
      PHOTON_RETURN_IF_ERROR(s);
      continue_ = false;
      if (break_) {
        break_ = false;
        break;
      }
    }
    return Status::ok();
  }

  void bind(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = item;
      return;
    }
    for (size_t k = 0; k < n.targets.size(); ++k) {
      scopes_.back()[n.targets[k]] =
          item.is_list() && k < item.list().size() ? item.list()[k] : Value::undefined(n.targets[k]);
    }
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value::undefined(name);
  }

  Result<Value> eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return lookup(e.name);
      case Expr::Kind::kList: {
        List l;
        for (const auto& item : e.items) {
          PHOTON_ASSIGN_OR_RETURN(Value v, eval(*item));
          l.push_back(std::move(v));
        }
        return Value(std::move(l));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          PHOTON_ASSIGN_OR_RETURN(Value k, eval(*e.items[i]));
          PHOTON_ASSIGN_OR_RETURN(Value v, eval(*e.items[i + 1]));
          if (!k.is_string()) return error_at(e, "dict keys must be strings");
          d.set(k.str(), std::move(v));
        }
        return Value(std::move(d));
      }
      case Expr::Kind::kAttr: {
        PHOTON_ASSIGN_OR_RETURN(Value obj, eval(*e.items[0]));
        return attribute(e, obj, e.name);
      }
      case Expr::Kind::kIndex: {
        PHOTON_ASSIGN_OR_RETURN(Value obj, eval(*e.items[0]));
        PHOTON_ASSIGN_OR_RETURN(Value key, eval(*e.items[1]));
        return index(e, obj, key);
      }
      case Expr::Kind::kSlice:
        return slice(e);
      case Expr::Kind::kCall: {
        PHOTON_ASSIGN_OR_RETURN(Value fn, eval(*e.items[0]));
        Args args;
        Kwargs kwargs;
        PHOTON_RETURN_IF_ERROR(eval_args(e, 1, args, kwargs));
        if (!fn.is_callable()) {
          const std::string what = e.items[0]->kind == Expr::Kind::kName   ? e.items[0]->name
                                   : e.items[0]->kind == Expr::Kind::kAttr ? e.items[0]->name
                                                                           : "expression";
          return error_at(e, fmt::format("'{}' is not callable ({})", what, type_name(fn)));
        }
        auto r = (*std::get<std::shared_ptr<Callable>>(fn.v))(args, kwargs);
        if (!r && r.status().message().find("template line") == std::string::npos &&
            r.status().code() != StatusCode::kCancelled) {
          return error_at(e, r.status().message());
        }
        if (!r && r.status().code() == StatusCode::kCancelled) {  // raise_exception: the template's own message
          return Status(StatusCode::kInvalidArgument, r.status().message());
        }
        return r;
      }
      case Expr::Kind::kFilter: {
        PHOTON_ASSIGN_OR_RETURN(Value v, eval(*e.items[0]));
        Args args;
        Kwargs kwargs;
        PHOTON_RETURN_IF_ERROR(eval_args(e, 1, args, kwargs));
        return filter(e, e.name, std::move(v), args, kwargs);
      }
      case Expr::Kind::kTest: {
        PHOTON_ASSIGN_OR_RETURN(Value v, eval(*e.items[0]));
        Args args;
        Kwargs kwargs;
        PHOTON_RETURN_IF_ERROR(eval_args(e, 1, args, kwargs));
        PHOTON_ASSIGN_OR_RETURN(bool r, test(e, e.name, v, args));
        return Value(e.negated ? !r : r);
      }
      case Expr::Kind::kUnary: {
        PHOTON_ASSIGN_OR_RETURN(Value v, eval(*e.items[0]));
        if (e.name == "not") return Value(!v.truthy());
        if (!v.is_number()) return error_at(e, fmt::format("unary '{}' needs a number, not {}", e.name, type_name(v)));
        if (e.name == "+") return v;
        return v.is_int() ? Value(-std::get<int64_t>(v.v)) : Value(-std::get<double>(v.v));
      }
      case Expr::Kind::kBinary:
        return binary(e);
      case Expr::Kind::kCondition: {
        PHOTON_ASSIGN_OR_RETURN(Value c, eval(*e.items[1]));
        if (c.truthy()) return eval(*e.items[0]);
        if (e.items[2]) return eval(*e.items[2]);
        return Value::undefined();
      }
    }
    return error_at(e, "unknown expression");
  }

  Status eval_args(const Expr& e, size_t first, Args& args, Kwargs& kwargs) {
    for (size_t i = first; i < e.items.size(); ++i) {
      PHOTON_ASSIGN_OR_RETURN(Value v, eval(*e.items[i]));
      args.push_back(std::move(v));
    }
    for (const auto& [k, x] : e.kwargs) {
      PHOTON_ASSIGN_OR_RETURN(Value v, eval(*x));
      kwargs.emplace_back(k, std::move(v));
    }
    return Status::ok();
  }

  Result<Value> binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and" || op == "or") {
      PHOTON_ASSIGN_OR_RETURN(Value l, eval(*e.items[0]));
      if (op == "and" ? !l.truthy() : l.truthy()) return l;
      return eval(*e.items[1]);
    }
    PHOTON_ASSIGN_OR_RETURN(Value l, eval(*e.items[0]));
    PHOTON_ASSIGN_OR_RETURN(Value r, eval(*e.items[1]));
    if (op == "~") return Value(l.to_output() + r.to_output());
    if (op == "==") return Value(l.equals(r));
    if (op == "!=") return Value(!l.equals(r));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.is_string() && l.is_string()) {
        found = r.str().find(l.str()) != std::string::npos;
      } else if (r.is_list()) {
        found = std::any_of(r.list().begin(), r.list().end(), [&](const Value& x) { return x.equals(l); });
      } else if (r.is_dict() && l.is_string()) {
        found = r.dict().find(l.str()) != nullptr;
      } else if (!r.is_undefined()) {
        return error_at(e, fmt::format("'in' needs a string, list or dict on the right, not {}", type_name(r)));
      }
      return Value(op == "in" ? found : !found);
    }
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int cmp = 0;
      if (l.is_number() && r.is_number()) {
        cmp = l.number() < r.number() ? -1 : (l.number() > r.number() ? 1 : 0);
      } else if (l.is_string() && r.is_string()) {
        cmp = l.str().compare(r.str());
      } else {
        return error_at(e, fmt::format("cannot compare {} and {}", type_name(l), type_name(r)));
      }
      return Value(op == "<" ? cmp < 0 : op == "<=" ? cmp <= 0 : op == ">" ? cmp > 0 : cmp >= 0);
    }
    if (op == "+") {
      if (l.is_string() && r.is_string()) return Value(l.str() + r.str());
      if (l.is_list() && r.is_list()) {
        List out = l.list();
        out.insert(out.end(), r.list().begin(), r.list().end());
        return Value(std::move(out));
      }
    }
    if (op == "*" && ((l.is_string() && r.is_int()) || (l.is_int() && r.is_string()))) {
      const std::string& s = l.is_string() ? l.str() : r.str();
      const int64_t n = l.is_int() ? std::get<int64_t>(l.v) : std::get<int64_t>(r.v);
      if (n > 0 && s.size() * static_cast<size_t>(n) > kMaxOutput) return error_at(e, "string repetition too large");
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += s;
      return Value(std::move(out));
    }
    if (!l.is_number() || !r.is_number()) {
      const std::string missing = l.is_undefined()   ? std::get<Undefined>(l.v).name
                                  : r.is_undefined() ? std::get<Undefined>(r.v).name
                                                     : "";
      if (!missing.empty()) return error_at(e, fmt::format("'{}' is undefined", missing));
      return error_at(e, fmt::format("unsupported operands for '{}': {} and {}", op, type_name(l), type_name(r)));
    }
    const bool ints = l.is_int() && r.is_int();
    if (op == "+")
      return ints ? Value(std::get<int64_t>(l.v) + std::get<int64_t>(r.v)) : Value(l.number() + r.number());
    if (op == "-")
      return ints ? Value(std::get<int64_t>(l.v) - std::get<int64_t>(r.v)) : Value(l.number() - r.number());
    if (op == "*")
      return ints ? Value(std::get<int64_t>(l.v) * std::get<int64_t>(r.v)) : Value(l.number() * r.number());
    if (r.number() == 0) return error_at(e, "division by zero");
    if (op == "/") return Value(l.number() / r.number());
    if (op == "//") {
      if (ints) {
        const int64_t a = std::get<int64_t>(l.v), b = std::get<int64_t>(r.v);
        return Value(a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0));
      }
      return Value(std::floor(l.number() / r.number()));
    }
    if (op == "%") {
      if (ints) {
        const int64_t a = std::get<int64_t>(l.v), b = std::get<int64_t>(r.v);
        const int64_t m = a % b;
        return Value(m != 0 && ((m < 0) != (b < 0)) ? m + b : m);
      }
      return Value(std::fmod(l.number(), r.number()));
    }
    if (op == "**")
      return ints && std::get<int64_t>(r.v) >= 0
                 ? Value(static_cast<int64_t>(std::llround(std::pow(l.number(), r.number()))))
                 : Value(std::pow(l.number(), r.number()));
    return error_at(e, fmt::format("unknown operator '{}'", op));
  }

  Result<Value> index(const Expr& e, const Value& obj, const Value& key) {
    if (obj.is_dict()) {
      if (!key.is_string()) return Value::undefined();
      const Value* v = obj.dict().find(key.str());
      return v ? *v : Value::undefined(key.str());
    }
    if ((obj.is_list() || obj.is_string()) && key.is_int()) {
      int64_t i = std::get<int64_t>(key.v);
      if (obj.is_list()) {
        if (!normalise_index(i, obj.list().size())) return Value::undefined();
        return obj.list()[static_cast<size_t>(i)];
      }
      const auto chars = characters(obj.str());
      if (!normalise_index(i, chars.size())) return Value::undefined();
      return Value(chars[static_cast<size_t>(i)]);
    }
    if (key.is_string()) return attribute(e, obj, key.str());
    if (obj.is_undefined()) return error_at(e, fmt::format("'{}' is undefined", std::get<Undefined>(obj.v).name));
    return Value::undefined();
  }

  Result<Value> slice(const Expr& e) {
    PHOTON_ASSIGN_OR_RETURN(Value obj, eval(*e.items[0]));
    int64_t parts[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.items[static_cast<size_t>(k) + 1]) continue;
      PHOTON_ASSIGN_OR_RETURN(Value v, eval(*e.items[static_cast<size_t>(k) + 1]));
      if (v.is_none()) continue;
      if (!v.is_int()) return error_at(e, "slice bounds must be integers");
      parts[k] = std::get<int64_t>(v.v);
      given[k] = true;
    }
    const int64_t step = parts[2];
    if (step == 0) return error_at(e, "slice step cannot be zero");
    if (!obj.is_list() && !obj.is_string()) return error_at(e, fmt::format("cannot slice a {}", type_name(obj)));
    const std::vector<std::string> chars = obj.is_string() ? characters(obj.str()) : std::vector<std::string>();
    const auto n = static_cast<int64_t>(obj.is_list() ? obj.list().size() : chars.size());
    auto clamp = [&](int64_t v, bool is_given, int64_t fallback) {
      if (!is_given) return fallback;
      if (v < 0) v += n;
      if (step > 0) return std::clamp<int64_t>(v, 0, n);
      return std::clamp<int64_t>(v, -1, n - 1);
    };
    const int64_t start = clamp(parts[0], given[0], step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(parts[1], given[1], step > 0 ? n : -1);
    List out;
    std::string sout;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (obj.is_list()) {
        out.push_back(obj.list()[static_cast<size_t>(i)]);
      } else {
        sout += chars[static_cast<size_t>(i)];
      }
    }
    return obj.is_list() ? Value(std::move(out)) : Value(std::move(sout));
  }

  // Attributes: dict keys, then methods of strings, lists and dicts.
  Result<Value> attribute(const Expr& e, const Value& obj, const std::string& name) {
    if (obj.is_dict()) {
      if (const Value* v = obj.dict().find(name)) return *v;
      if (obj.is_namespace) return Value::undefined(name);
      const Value d = obj;
      if (name == "items") {
        return Value(Callable([d](Args&, Kwargs&) -> Result<Value> {
          List out;
          for (const auto& [k, v] : d.dict().items) out.push_back(Value(List{Value(k), v}));
          return Value(std::move(out));
        }));
      }
      if (name == "keys" || name == "values") {
        const bool keys = name == "keys";
        return Value(Callable([d, keys](Args&, Kwargs&) -> Result<Value> {
          List out;
          for (const auto& [k, v] : d.dict().items) out.push_back(keys ? Value(k) : v);
          return Value(std::move(out));
        }));
      }
      if (name == "get") {
        return Value(Callable([d](Args& a, Kwargs&) -> Result<Value> {
          if (a.empty() || !a[0].is_string()) return Status(StatusCode::kInvalidArgument, "get() needs a key");
          const Value* v = d.dict().find(a[0].str());
          return v ? *v : (a.size() > 1 ? a[1] : Value::none());
        }));
      }
      return Value::undefined(name);
    }
    if (obj.is_string()) return string_method(obj.str(), name);
    if (obj.is_list()) {
      if (name == "append") {
        return Value(Callable([l = obj](Args& a, Kwargs&) -> Result<Value> {
          for (auto& x : a) l.list().push_back(x);
          return Value::none();
        }));
      }
      return Value::undefined(name);
    }
    if (obj.is_undefined()) {
      return error_at(
          e, fmt::format("'{}' is undefined (reading its attribute '{}')", std::get<Undefined>(obj.v).name, name));
    }
    return Value::undefined(name);
  }

  static Result<Value> string_method(const std::string& s, const std::string& name) {
    auto chars_arg = [](const Args& a) { return a.empty() || a[0].is_none() ? kWhitespace : a[0].to_output(); };
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool left = name != "rstrip", right = name != "lstrip";
      return Value(Callable([s, left, right, chars_arg](Args& a, Kwargs&) -> Result<Value> {
        return Value(strip_chars(s, chars_arg(a), left, right));
      }));
    }
    if (name == "startswith" || name == "endswith") {
      const bool start = name == "startswith";
      return Value(Callable([s, start](Args& a, Kwargs&) -> Result<Value> {
        if (a.empty()) return Status(StatusCode::kInvalidArgument, "startswith/endswith needs an argument");
        List options = a[0].is_list() ? a[0].list() : List{a[0]};
        for (const Value& o : options) {
          const std::string p = o.to_output();
          if (start ? s.starts_with(p) : s.ends_with(p)) return Value(true);
        }
        return Value(false);
      }));
    }
    if (name == "split" || name == "rsplit") {
      return Value(Callable([s](Args& a, Kwargs& kw) -> Result<Value> {
        const Value sep = kwarg(kw, "sep", a, 0, Value::none());
        const Value maxv = kwarg(kw, "maxsplit", a, 1, Value(-1));
        int64_t max_splits = maxv.is_int() ? std::get<int64_t>(maxv.v) : -1;
        List out;
        if (sep.is_none()) {  // runs of whitespace, no empty strings
          size_t i = 0;
          while (i < s.size()) {
            while (i < s.size() && kWhitespace.find(s[i]) != std::string::npos) ++i;
            if (i >= s.size()) break;
            if (max_splits == 0) {
              out.emplace_back(strip_chars(s.substr(i), kWhitespace, false, true));
              break;
            }
            size_t j = i;
            while (j < s.size() && kWhitespace.find(s[j]) == std::string::npos) ++j;
            out.emplace_back(s.substr(i, j - i));
            --max_splits;
            i = j;
          }
          return Value(std::move(out));
        }
        const std::string d = sep.to_output();
        if (d.empty()) return Status(StatusCode::kInvalidArgument, "split(): empty separator");
        size_t pos = 0;
        while (max_splits != 0) {
          const size_t hit = s.find(d, pos);
          if (hit == std::string::npos) break;
          out.emplace_back(s.substr(pos, hit - pos));
          pos = hit + d.size();
          --max_splits;
        }
        out.emplace_back(s.substr(pos));
        return Value(std::move(out));
      }));
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      return Value(Callable([s, name](Args&, Kwargs&) -> Result<Value> {
        std::string out = s;
        bool word_start = true;
        for (size_t i = 0; i < out.size(); ++i) {
          const unsigned char c = static_cast<unsigned char>(out[i]);
          if (name == "upper") {
            out[i] = static_cast<char>(std::toupper(c));
          } else if (name == "lower") {
            out[i] = static_cast<char>(std::tolower(c));
          } else if (name == "title") {
            out[i] = static_cast<char>(word_start ? std::toupper(c) : std::tolower(c));
            word_start = !std::isalpha(c);
          } else {
            out[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
          }
        }
        return Value(std::move(out));
      }));
    }
    if (name == "replace") {
      return Value(Callable([s](Args& a, Kwargs&) -> Result<Value> {
        if (a.size() < 2) return Status(StatusCode::kInvalidArgument, "replace() needs two arguments");
        const std::string from = a[0].to_output(), to = a[1].to_output();
        if (from.empty()) return Value(s);
        std::string out;
        size_t pos = 0;
        for (size_t hit = 0; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
          out.append(s, pos, hit - pos).append(to);
        }
        return Value(out.append(s, pos));
      }));
    }
    if (name == "find" || name == "count") {
      const bool count = name == "count";
      return Value(Callable([s, count](Args& a, Kwargs&) -> Result<Value> {
        if (a.empty()) return Status(StatusCode::kInvalidArgument, "find()/count() needs an argument");
        const std::string p = a[0].to_output();
        if (!count) {
          const size_t hit = s.find(p);
          return Value(hit == std::string::npos ? int64_t{-1} : static_cast<int64_t>(hit));
        }
        int64_t n = 0;
        for (size_t pos = 0; !p.empty() && (pos = s.find(p, pos)) != std::string::npos; pos += p.size()) ++n;
        return Value(n);
      }));
    }
    if (name == "join") {
      return Value(Callable([s](Args& a, Kwargs&) -> Result<Value> {
        if (a.empty() || !a[0].is_list()) return Status(StatusCode::kInvalidArgument, "join() needs a list");
        std::string out;
        for (size_t i = 0; i < a[0].list().size(); ++i) out += (i ? s : "") + a[0].list()[i].to_output();
        return Value(std::move(out));
      }));
    }
    return Value::undefined(name);
  }

  Result<Value> filter(const Expr& e, const std::string& name, Value v, Args& a, Kwargs& kw) {
    if (name == "trim")
      return Value(strip_chars(v.to_output(), a.empty() ? kWhitespace : a[0].to_output(), true, true));
    if (name == "length" || name == "count") {
      if (v.is_string()) return Value(static_cast<int64_t>(characters(v.str()).size()));
      if (v.is_list()) return Value(static_cast<int64_t>(v.list().size()));
      if (v.is_dict()) return Value(static_cast<int64_t>(v.dict().items.size()));
      if (v.is_undefined()) return Value(int64_t{0});
      return error_at(e, fmt::format("length of a {}", type_name(v)));
    }
    if (name == "tojson") {
      const Value ind = kwarg(kw, "indent", a, 0, Value::none());
      auto json = to_json(v, ind.is_int() ? static_cast<int>(std::get<int64_t>(ind.v)) : -1);
      if (!json) return error_at(e, json.status().message());
      return Value(std::move(*json));
    }
    if (name == "string") return Value(v.to_output());
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      PHOTON_ASSIGN_OR_RETURN(Value m, string_method(v.to_output(), name));
      Args none;
      Kwargs nokw;
      return (*std::get<std::shared_ptr<Callable>>(m.v))(none, nokw);
    }
    if (name == "replace") {
      PHOTON_ASSIGN_OR_RETURN(Value m, string_method(v.to_output(), "replace"));
      return (*std::get<std::shared_ptr<Callable>>(m.v))(a, kw);
    }
    if (name == "default" || name == "d") {
      const Value fallback = kwarg(kw, "default_value", a, 0, Value(""));
      const bool boolean = kwarg(kw, "boolean", a, 1, Value(false)).truthy();
      if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
      return v;
    }
    if (name == "join") {
      if (!v.is_list()) return error_at(e, "join needs a list");
      const std::string sep = a.empty() ? "" : a[0].to_output();
      std::string out;
      for (size_t i = 0; i < v.list().size(); ++i) out += (i ? sep : "") + v.list()[i].to_output();
      return Value(std::move(out));
    }
    if (name == "first" || name == "last") {
      if (v.is_list()) {
        if (v.list().empty()) return Value::undefined();
        return name == "first" ? v.list().front() : v.list().back();
      }
      if (v.is_string() && !v.str().empty()) {
        const auto chars = characters(v.str());
        return Value(name == "first" ? chars.front() : chars.back());
      }
      return Value::undefined();
    }
    if (name == "list") {
      if (v.is_list()) return v;
      List out;
      if (v.is_string()) {
        for (auto& c : characters(v.str())) out.emplace_back(std::move(c));
      } else if (v.is_dict()) {
        for (const auto& [k, x] : v.dict().items) out.emplace_back(k);
      }
      return Value(std::move(out));
    }
    if (name == "reverse") {
      if (v.is_string()) {
        auto chars = characters(v.str());
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
        return Value(std::move(out));
      }
      if (v.is_list()) return Value(List(v.list().rbegin(), v.list().rend()));
      return error_at(e, "reverse needs a string or list");
    }
    if (name == "int") {
      if (v.is_number()) return Value(static_cast<int64_t>(v.number()));
      if (v.is_string()) {
        try {
          return Value(static_cast<int64_t>(std::stoll(v.str())));
        } catch (...) {
          return Value(int64_t{0});
        }
      }
      return Value(int64_t{0});
    }
    if (name == "float") return Value(v.is_number() ? v.number() : 0.0);
    if (name == "abs")
      return v.is_int() ? Value(static_cast<int64_t>(std::llabs(std::get<int64_t>(v.v))))
                        : Value(std::fabs(v.number()));
    if (name == "safe" || name == "e" || name == "escape") return v;
    if (name == "items") {
      if (!v.is_dict()) return error_at(e, "items needs a dict");
      List out;
      for (const auto& [k, x] : v.dict().items) out.push_back(Value(List{Value(k), x}));
      return Value(std::move(out));
    }
    if (name == "selectattr" || name == "rejectattr" || name == "map") {
      if (!v.is_list()) return error_at(e, fmt::format("{} needs a list", name));
      List out;
      if (name == "map") {
        const Value attr = kwarg(kw, "attribute", {}, 0, Value::undefined());
        if (!attr.is_string()) return error_at(e, "map supports attribute='...' only");
        for (const Value& item : v.list()) {
          PHOTON_ASSIGN_OR_RETURN(Value x, attribute(e, item, attr.str()));
          out.push_back(std::move(x));
        }
        return Value(std::move(out));
      }
      if (a.empty() || !a[0].is_string()) return error_at(e, fmt::format("{} needs an attribute name", name));
      for (const Value& item : v.list()) {
        PHOTON_ASSIGN_OR_RETURN(Value x, attribute(e, item, a[0].str()));
        bool ok = x.truthy();
        if (a.size() > 1) {
          Args rest(a.begin() + 2, a.end());
          PHOTON_ASSIGN_OR_RETURN(ok, test(e, a[1].to_output(), x, rest));
        }
        if (ok == (name == "selectattr")) out.push_back(item);
      }
      return Value(std::move(out));
    }
    if (name == "indent") {
      const int64_t width = a.empty() || !a[0].is_int() ? 4 : std::get<int64_t>(a[0].v);
      const bool first = kwarg(kw, "first", a, 1, Value(false)).truthy();
      const std::string pad(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
      std::string s = v.to_output(), out;
      for (size_t i = 0; i < s.size(); ++i) {
        out += s[i];
        if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') out += pad;
      }
      return Value(first ? pad + out : out);
    }
    return error_at(e, fmt::format("unsupported filter '{}'", name));
  }

  Result<bool> test(const Expr& e, const std::string& name, const Value& v, const Args& a) {
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "boolean") return v.is_bool();
    if (name == "true") return v.is_bool() && std::get<bool>(v.v);
    if (name == "false") return v.is_bool() && !std::get<bool>(v.v);
    if (name == "mapping") return v.is_dict();
    if (name == "sequence") return v.is_list() || v.is_string();
    if (name == "iterable") return v.is_list() || v.is_string() || v.is_dict();
    if (name == "callable") return v.is_callable();
    if (name == "odd" || name == "even") {
      if (!v.is_int()) return error_at(e, fmt::format("'{}' needs an integer", name));
      return (std::get<int64_t>(v.v) % 2 != 0) == (name == "odd");
    }
    if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") {
      if (a.empty()) return error_at(e, fmt::format("'{}' needs an argument", name));
      return v.equals(a[0]);
    }
    if (name == "ne" || name == "!=") return a.empty() ? false : !v.equals(a[0]);
    if (name == "in") {
      if (a.empty()) return error_at(e, "'in' needs an argument");
      if (a[0].is_list())
        return std::any_of(a[0].list().begin(), a[0].list().end(), [&](const Value& x) { return x.equals(v); });
      if (a[0].is_string() && v.is_string()) return a[0].str().find(v.str()) != std::string::npos;
      if (a[0].is_dict() && v.is_string()) return a[0].dict().find(v.str()) != nullptr;
      return false;
    }
    return error_at(e, fmt::format("unsupported test '{}'", name));
  }

  std::vector<std::unordered_map<std::string, Value>> scopes_;
  bool break_ = false;
  bool continue_ = false;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

// Globals every chat template may call.
void add_builtins(std::unordered_map<std::string, Value>& g) {
  g["raise_exception"] = Value(Callable([](Args& a, Kwargs&) -> Result<Value> {
    // kCancelled marks "the template's own message": the renderer reports it verbatim.
    return Status(StatusCode::kCancelled, a.empty() ? "raise_exception() called" : a[0].to_output());
  }));
  g["strftime_now"] = Value(Callable([](Args& a, Kwargs&) -> Result<Value> {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const std::string format = a.empty() ? "%Y-%m-%d" : a[0].to_output();
    const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
    return Value(std::string(buf, n));
  }));
  g["range"] = Value(Callable([](Args& a, Kwargs&) -> Result<Value> {
    int64_t start = 0, stop = 0, step = 1;
    for (const Value& x : a) {
      if (!x.is_int()) return Status(StatusCode::kInvalidArgument, "range() takes integers");
    }
    if (a.size() == 1) stop = std::get<int64_t>(a[0].v);
    if (a.size() >= 2) {
      start = std::get<int64_t>(a[0].v);
      stop = std::get<int64_t>(a[1].v);
    }
    if (a.size() >= 3) step = std::get<int64_t>(a[2].v);
    if (step == 0) return Status(StatusCode::kInvalidArgument, "range() step cannot be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      out.emplace_back(i);
      if (out.size() > 1000000) return Status(StatusCode::kInvalidArgument, "range() is too long");
    }
    return Value(std::move(out));
  }));
  g["namespace"] = Value(Callable([](Args&, Kwargs& kw) -> Result<Value> {
    Dict d;
    for (auto& [k, v] : kw) d.set(k, v);
    Value ns(std::move(d));
    ns.is_namespace = true;
    return ns;
  }));
  g["dict"] = Value(Callable([](Args&, Kwargs& kw) -> Result<Value> {
    Dict d;
    for (auto& [k, v] : kw) d.set(k, v);
    return Value(std::move(d));
  }));
}

}  // namespace

Result<std::string> render(const Body& body, const std::unordered_map<std::string, Value>& variables) {
  std::unordered_map<std::string, Value> globals;
  add_builtins(globals);
  for (const auto& [k, v] : variables) globals[k] = v;
  Renderer r(globals);
  std::string out;
  PHOTON_RETURN_IF_ERROR(r.render(body, out));
  return out;
}

}  // namespace photon::jinja
