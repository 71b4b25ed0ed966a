#include "template/render.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "template/builtins.hpp"

namespace photon::jinja {
namespace {

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
        return apply_filter(e, e.name, std::move(v), args, kwargs);
      }
      case Expr::Kind::kTest: {
        PHOTON_ASSIGN_OR_RETURN(Value v, eval(*e.items[0]));
        Args args;
        Kwargs kwargs;
        PHOTON_RETURN_IF_ERROR(eval_args(e, 1, args, kwargs));
        PHOTON_ASSIGN_OR_RETURN(bool r, apply_test(e, e.name, v, args));
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
      const Result<int> ordered = compare(l, r, true);
      if (!ordered) return error_at(e, fmt::format("cannot compare {} and {}", type_name(l), type_name(r)));
      const int cmp = *ordered;
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
    if (op == "%" && l.is_string()) {  // printf-style formatting: a tuple (list) gives the arguments
      auto text = percent_format(l.str(), r.is_list() ? r.list() : Args{r});
      if (!text) return error_at(e, text.status().message());
      return Value(std::move(*text));
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

  std::vector<std::unordered_map<std::string, Value>> scopes_;
  bool break_ = false;
  bool continue_ = false;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Result<std::string> render(const Body& body, const std::unordered_map<std::string, Value>& variables) {
  std::unordered_map<std::string, Value> globals;
  add_globals(globals);
  for (const auto& [k, v] : variables) globals[k] = v;
  Renderer r(globals);
  std::string out;
  PHOTON_RETURN_IF_ERROR(r.render(body, out));
  return out;
}

}  // namespace photon::jinja
