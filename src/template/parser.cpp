#include "template/parser.hpp"

#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "tokenizer/utf8.hpp"

namespace photon::jinja {
namespace {

struct Token {
  enum Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd } type;
  std::string text;
  int line = 1, column = 1;
};

Status syntax_error(int line, int column, const std::string& message) {
  return Status(StatusCode::kInvalidArgument, fmt::format("template line {}, column {}: {}", line, column, message));
}

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  Result<std::vector<Token>> run() {
    std::vector<Token> out;
    bool strip_next = false;    // a `-` closed the previous tag
    bool trim_newline = false;  // trim_blocks: the previous tag was a block or comment
    while (pos_ < s_.size()) {
      const size_t open = find_open(pos_);
      std::string text(s_.substr(pos_, open - pos_));
      if (strip_next) {
        const size_t first = text.find_first_not_of(" \t\r\n");
        text.erase(0, first == std::string::npos ? text.size() : first);
      } else if (trim_newline && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
      } else if (trim_newline && text.size() >= 2 && text[0] == '\r' && text[1] == '\n') {
        text.erase(0, 2);
      }
      strip_next = trim_newline = false;
      if (open >= s_.size()) {
        push_text(out, std::move(text), pos_);
        pos_ = s_.size();
        break;
      }
      const char kind = s_[open + 1];  // '{', '%' or '#'
      const bool minus = open + 2 < s_.size() && s_[open + 2] == '-';
      const bool plus = open + 2 < s_.size() && s_[open + 2] == '+';
      if (minus) {
        const size_t last = text.find_last_not_of(" \t\r\n");
        text.erase(last == std::string::npos ? 0 : last + 1);
      } else if (kind != '{' && !plus) {
        // lstrip_blocks: spaces and tabs between the start of a line (in the source) and a block tag go.
        size_t k = open;
        while (k > pos_ && (s_[k - 1] == ' ' || s_[k - 1] == '\t')) --k;
        if (k == 0 || s_[k - 1] == '\n') text.erase(text.size() - std::min(text.size(), open - k));
      }
      push_text(out, std::move(text), pos_);
      pos_ = open + 2 + ((minus || plus) ? 1 : 0);
      if (kind == '#') {
        const size_t close = s_.find("#}", pos_);
        if (close == std::string::npos) return error_at(open, "a comment {# is never closed");
        strip_next = close > 0 && s_[close - 1] == '-';
        trim_newline = !strip_next;
        pos_ = close + 2;
        continue;
      }
      Token begin{kind == '{' ? Token::kVarBegin : Token::kBlockBegin, "", 0, 0};
      locate(open, begin);
      out.push_back(begin);
      PHOTON_RETURN_IF_ERROR(lex_tag(out, kind == '{' ? '}' : '%', &strip_next));
      trim_newline = kind == '%' && !strip_next;
    }
    Token end{Token::kEnd, "", 0, 0};
    locate(s_.size(), end);
    out.push_back(end);
    return out;
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i) {
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return s_.size();
  }

  void locate(size_t offset, Token& t) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < offset && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    t.line = line;
    t.column = col;
  }

  Status error_at(size_t offset, const std::string& message) const {
    Token t;
    locate(offset, t);
    return syntax_error(t.line, t.column, message);
  }

  void push_text(std::vector<Token>& out, std::string text, size_t offset) {
    if (text.empty()) return;
    Token t{Token::kText, std::move(text), 0, 0};
    locate(offset, t);
    out.push_back(std::move(t));
  }

  // One backslash escape of a string literal, pos_ at the backslash: Python's string escapes, as Jinja2 reads
  // them (\n \t \xHH \uHHHH \UHHHHHHHH, octal; a backslash before a newline continues the line; an unknown escape
  // keeps its backslash). Code points are appended as UTF-8.
  Status read_escape(std::string& out) {
    static constexpr std::string_view kNamed = "\\'\"abfnrtv", kNamedAs = "\\'\"\a\b\f\n\r\t\v";
    const size_t at = pos_++;
    const char e = s_[pos_++];
    if (e == '\n') return Status::ok();
    if (const size_t i = kNamed.find(e); i != std::string_view::npos) {
      out += kNamedAs[i];
      return Status::ok();
    }
    uint32_t cp = 0;
    if (e == 'x' || e == 'u' || e == 'U') {
      const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      for (int i = 0; i < digits; ++i, ++pos_) {
        const char h = pos_ < s_.size() ? s_[pos_] : '\0';
        if (!std::isxdigit(static_cast<unsigned char>(h))) {
          return error_at(at, fmt::format("truncated \\{} escape: it takes {} hexadecimal digits", e, digits));
        }
        cp = cp * 16 +
             static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
      }
    } else if (e >= '0' && e <= '7') {
      cp = static_cast<uint32_t>(e - '0');
      for (int i = 1; i < 3 && pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '7'; ++i) {
        cp = cp * 8 + static_cast<uint32_t>(s_[pos_++] - '0');
      }
    } else if (e == 'N') {
      return error_at(at, "\\N{...} escapes are not supported: write the character itself");
    } else {
      out += '\\';
      out += e;
      return Status::ok();
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return error_at(at, fmt::format("\\{} escape names U+{:X}, which is not a Unicode character", e, cp));
    }
    utf8::append(out, static_cast<char32_t>(cp));
    return Status::ok();
  }

  // Tokens up to the tag's end ("}}" or "%}", with an optional "-" before it).
  Status lex_tag(std::vector<Token>& out, char closer, bool* strip_next) {
    while (true) {
      while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      if (pos_ >= s_.size()) return error_at(pos_, "a tag is never closed");
      const size_t start = pos_;
      const char c = s_[pos_];
      if ((c == '-' || c == '+') && pos_ + 2 < s_.size() && s_[pos_ + 1] == closer && s_[pos_ + 2] == '}') {
        *strip_next = c == '-';
        pos_ += 3;
        break;
      }
      if (c == closer && pos_ + 1 < s_.size() && s_[pos_ + 1] == '}') {
        pos_ += 2;
        break;
      }
      Token t;
      locate(start, t);
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        t.type = Token::kName;
        t.text = std::string(s_.substr(start, pos_ - start));
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
        t.type = Token::kInt;
        if (pos_ + 1 < s_.size() && s_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
          ++pos_;
          while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
          t.type = Token::kFloat;
        }
        if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {  // an exponent: 1e20, 2.5e-3
          size_t k = pos_ + 1;
          if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
          if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
            pos_ = k;
            while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
            t.type = Token::kFloat;
          }
        }
        t.text = std::string(s_.substr(start, pos_ - start));
      } else if (c == '"' || c == '\'') {
        t.type = Token::kString;
        ++pos_;
        while (pos_ < s_.size() && s_[pos_] != c) {
          if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) {
            PHOTON_RETURN_IF_ERROR(read_escape(t.text));
          } else {
            t.text += s_[pos_++];
          }
        }
        if (pos_ >= s_.size()) return error_at(start, "a string is never closed");
        ++pos_;
      } else {
        static constexpr std::string_view kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                                    "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                                    "]",  "{",  "}",  ".",  ",",  ":",  "|"};
        bool found = false;
        for (std::string_view op : kOps) {
          if (s_.substr(pos_, op.size()) == op) {
            t.type = Token::kOp;
            t.text = std::string(op);
            pos_ += op.size();
            found = true;
            break;
          }
        }
        if (!found) return error_at(start, fmt::format("unexpected character '{}'", c));
      }
      out.push_back(std::move(t));
    }
    Token end{closer == '}' ? Token::kVarEnd : Token::kBlockEnd, "", 0, 0};
    locate(pos_, end);
    out.push_back(end);
    return Status::ok();
  }

  std::string_view s_;
  size_t pos_ = 0;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Result<Body> parse_all() {
    Body body;
    std::string stop;
    PHOTON_RETURN_IF_ERROR(parse_body(body, {}, &stop));
    return body;
  }

 private:
  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  Token next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool is_op(std::string_view op, size_t k = 0) const { return peek(k).type == Token::kOp && peek(k).text == op; }
  bool is_name(std::string_view n, size_t k = 0) const { return peek(k).type == Token::kName && peek(k).text == n; }
  Status err(const std::string& m) const { return syntax_error(peek().line, peek().column, m); }
  Status expect_op(std::string_view op) {
    if (!is_op(op)) return err(fmt::format("expected '{}'", op));
    ++i_;
    return Status::ok();
  }
  Status expect_block_end() {
    if (peek().type != Token::kBlockEnd) return err("expected the end of the tag (%})");
    ++i_;
    return Status::ok();
  }

  // Parses nodes until a block tag whose keyword is in `stops` (left unconsumed after its keyword is read into
  // *stop), or the end of input when `stops` is empty.
  Status parse_body(Body& body, std::initializer_list<std::string_view> stops, std::string* stop) {
    const Depth guard(depth_);
    if (depth_ > kMaxDepth) return err("blocks are nested too deeply");
    while (true) {
      const Token& tok = peek();
      if (tok.type == Token::kEnd) {
        if (stops.size() == 0) return Status::ok();
        return err(fmt::format("the template ends inside a block; expected {{% {} %}}", *(stops.end() - 1)));
      }
      if (tok.type == Token::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->text = next().text;
        body.push_back(std::move(n));
        continue;
      }
      if (tok.type == Token::kVarBegin) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = tok.line;
        n->column = tok.column;
        PHOTON_ASSIGN_OR_RETURN(n->expr, parse_expr());
        if (peek().type != Token::kVarEnd) return err("expected '}}'");
        ++i_;
        body.push_back(std::move(n));
        continue;
      }
      // A block tag.
      ++i_;
      if (peek().type != Token::kName) return err("expected a statement name after {%");
      const std::string keyword = peek().text;
      for (std::string_view s : stops) {
        if (keyword == s) {
          ++i_;
          *stop = keyword;
          return Status::ok();
        }
      }
      ++i_;
      PHOTON_RETURN_IF_ERROR(parse_statement(keyword, body, tok));
    }
  }

  Status parse_statement(const std::string& keyword, Body& body, const Token& at) {
    auto n = std::make_unique<Node>();
    n->line = at.line;
    n->column = at.column;
    std::string stop;
    if (keyword == "if") {
      n->kind = Node::Kind::kIf;
      PHOTON_ASSIGN_OR_RETURN(ExprPtr cond, parse_expr());
      PHOTON_RETURN_IF_ERROR(expect_block_end());
      while (true) {
        Body branch;
        PHOTON_RETURN_IF_ERROR(parse_body(branch, {"elif", "else", "endif"}, &stop));
        n->branches.emplace_back(std::move(cond), std::move(branch));
        if (stop == "endif") break;
        if (stop == "else") {
          PHOTON_RETURN_IF_ERROR(expect_block_end());
          Body last;
          PHOTON_RETURN_IF_ERROR(parse_body(last, {"endif"}, &stop));
          n->branches.emplace_back(nullptr, std::move(last));
          break;
        }
        PHOTON_ASSIGN_OR_RETURN(cond, parse_expr());  // elif
        PHOTON_RETURN_IF_ERROR(expect_block_end());
      }
      PHOTON_RETURN_IF_ERROR(expect_block_end());
    } else if (keyword == "for") {
      n->kind = Node::Kind::kFor;
      do {
        if (peek().type != Token::kName) return err("expected a loop variable name");
        n->targets.push_back(next().text);
      } while (is_op(",") && (++i_, true));
      if (!is_name("in")) return err("expected 'in' in the for loop");
      ++i_;
      PHOTON_ASSIGN_OR_RETURN(n->expr, parse_or());
      if (is_name("if")) {
        ++i_;
        PHOTON_ASSIGN_OR_RETURN(n->cond, parse_or());
      }
      PHOTON_RETURN_IF_ERROR(expect_block_end());
      PHOTON_RETURN_IF_ERROR(parse_body(n->body, {"else", "endfor"}, &stop));
      if (stop == "else") {
        PHOTON_RETURN_IF_ERROR(expect_block_end());
        PHOTON_RETURN_IF_ERROR(parse_body(n->else_body, {"endfor"}, &stop));
      }
      PHOTON_RETURN_IF_ERROR(expect_block_end());
    } else if (keyword == "set") {
      if (peek().type != Token::kName) return err("expected a variable name after set");
      n->targets.push_back(next().text);
      if (is_op(".")) {
        ++i_;
        if (peek().type != Token::kName) return err("expected an attribute name");
        n->targets.push_back(next().text);
      }
      if (is_op("=")) {
        ++i_;
        n->kind = Node::Kind::kSet;
        PHOTON_ASSIGN_OR_RETURN(n->expr, parse_expr());
        PHOTON_RETURN_IF_ERROR(expect_block_end());
      } else {
        n->kind = Node::Kind::kSetBlock;
        PHOTON_RETURN_IF_ERROR(expect_block_end());
        PHOTON_RETURN_IF_ERROR(parse_body(n->body, {"endset"}, &stop));
        PHOTON_RETURN_IF_ERROR(expect_block_end());
      }
    } else if (keyword == "break" || keyword == "continue") {
      n->kind = keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      PHOTON_RETURN_IF_ERROR(expect_block_end());
    } else if (keyword == "generation") {
      // transformers' marker around assistant text: renders its body unchanged.
      PHOTON_RETURN_IF_ERROR(expect_block_end());
      PHOTON_RETURN_IF_ERROR(parse_body(body, {"endgeneration"}, &stop));
      return expect_block_end();
    } else if (keyword == "macro") {
      n->kind = Node::Kind::kMacro;
      if (peek().type != Token::kName) return err("expected a macro name");
      n->text = next().text;
      PHOTON_RETURN_IF_ERROR(expect_op("("));
      while (!is_op(")")) {
        if (peek().type != Token::kName) return err("expected a parameter name");
        n->targets.push_back(next().text);
        if (is_op("=")) {
          ++i_;
          PHOTON_ASSIGN_OR_RETURN(ExprPtr d, parse_expr());
          n->defaults.push_back(std::move(d));
        } else {
          n->defaults.push_back(nullptr);
        }
        if (is_op(",")) ++i_;
      }
      ++i_;
      PHOTON_RETURN_IF_ERROR(expect_block_end());
      PHOTON_RETURN_IF_ERROR(parse_body(n->body, {"endmacro"}, &stop));
      PHOTON_RETURN_IF_ERROR(expect_block_end());
    } else {
      return syntax_error(at.line, at.column, fmt::format("unsupported statement '{}'", keyword));
    }
    body.push_back(std::move(n));
    return Status::ok();
  }

  ExprPtr make(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  // Nesting guard: a hostile template must not exhaust the stack.
  struct Depth {
    explicit Depth(int& d) : d_(d) { ++d_; }
    ~Depth() { --d_; }
    int& d_;
  };
  static constexpr int kMaxDepth = 200;

  Result<ExprPtr> parse_expr() {
    const Depth guard(depth_);
    if (depth_ > kMaxDepth) return err("the expression is nested too deeply");
    const Token at = peek();
    PHOTON_ASSIGN_OR_RETURN(ExprPtr value, parse_or());
    if (!is_name("if")) return value;
    ++i_;
    auto e = make(Expr::Kind::kCondition, at);
    PHOTON_ASSIGN_OR_RETURN(ExprPtr cond, parse_or());
    ExprPtr other;
    if (is_name("else")) {
      ++i_;
      PHOTON_ASSIGN_OR_RETURN(other, parse_expr());
    }
    e->items.push_back(std::move(value));
    e->items.push_back(std::move(cond));
    e->items.push_back(std::move(other));
    return e;
  }

  Result<ExprPtr> binary(Result<ExprPtr> (Parser::*sub)(), std::initializer_list<std::string_view> ops, bool names) {
    PHOTON_ASSIGN_OR_RETURN(ExprPtr left, (this->*sub)());
    while (true) {
      std::string op;
      for (std::string_view o : ops) {
        if (names ? is_name(o) : is_op(o)) op = std::string(o);
      }
      if (op.empty()) return left;
      const Token at = next();
      PHOTON_ASSIGN_OR_RETURN(ExprPtr right, (this->*sub)());
      auto e = make(Expr::Kind::kBinary, at);
      e->name = op;
      e->items.push_back(std::move(left));
      e->items.push_back(std::move(right));
      left = std::move(e);
    }
  }

  Result<ExprPtr> parse_or() { return binary(&Parser::parse_and, {"or"}, true); }
  Result<ExprPtr> parse_and() { return binary(&Parser::parse_not, {"and"}, true); }
  Result<ExprPtr> parse_not() {
    const Depth guard(depth_);
    if (depth_ > kMaxDepth) return err("the expression is nested too deeply");
    if (is_name("not")) {
      const Token at = next();
      PHOTON_ASSIGN_OR_RETURN(ExprPtr inner, parse_not());
      auto e = make(Expr::Kind::kUnary, at);
      e->name = "not";
      e->items.push_back(std::move(inner));
      return e;
    }
    return parse_compare();
  }
  Result<ExprPtr> parse_compare() {
    PHOTON_ASSIGN_OR_RETURN(ExprPtr left, parse_math1());
    while (true) {
      std::string op;
      if (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">=")) {
        op = peek().text;
        ++i_;
      } else if (is_name("in")) {
        op = "in";
        ++i_;
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        i_ += 2;
      } else {
        return left;
      }
      const Token at = peek();
      PHOTON_ASSIGN_OR_RETURN(ExprPtr right, parse_math1());
      auto e = make(Expr::Kind::kBinary, at);
      e->name = op;
      e->items.push_back(std::move(left));
      e->items.push_back(std::move(right));
      left = std::move(e);
    }
  }
  Result<ExprPtr> parse_math1() { return binary(&Parser::parse_concat, {"+", "-"}, false); }
  Result<ExprPtr> parse_concat() { return binary(&Parser::parse_math2, {"~"}, false); }
  Result<ExprPtr> parse_math2() { return binary(&Parser::parse_pow, {"*", "/", "//", "%"}, false); }
  Result<ExprPtr> parse_pow() { return binary(&Parser::parse_filtered_unary, {"**"}, false); }
  Result<ExprPtr> parse_filtered_unary() { return parse_unary(true); }

  // As Jinja2 parses it: a sign binds tighter than filters (-1.5 | abs is (-1.5) | abs), so the operand of a sign
  // takes no filters of its own.
  Result<ExprPtr> parse_unary(bool with_filters = true) {
    const Depth guard(depth_);
    if (depth_ > kMaxDepth) return err("the expression is nested too deeply");
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token at = next();
      PHOTON_ASSIGN_OR_RETURN(ExprPtr inner, parse_unary(false));
      e = make(Expr::Kind::kUnary, at);
      e->name = at.text;
      e->items.push_back(std::move(inner));
    } else {
      PHOTON_ASSIGN_OR_RETURN(e, parse_primary());
      PHOTON_ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
    }
    return with_filters ? parse_filters(std::move(e)) : Result<ExprPtr>(std::move(e));
  }

  Status parse_args(Expr& call) {
    // After '(' : positional and keyword arguments up to ')'.
    while (!is_op(")")) {
      if (peek().type == Token::kName && is_op("=", 1)) {
        std::string key = next().text;
        ++i_;
        PHOTON_ASSIGN_OR_RETURN(ExprPtr v, parse_expr());
        call.kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        PHOTON_ASSIGN_OR_RETURN(ExprPtr v, parse_expr());
        call.items.push_back(std::move(v));
      }
      if (is_op(",")) {
        ++i_;
      } else if (!is_op(")")) {
        return err("expected ',' or ')' in the argument list");
      }
    }
    ++i_;
    return Status::ok();
  }

  Result<ExprPtr> parse_postfix(ExprPtr e) {
    while (true) {
      const Token at = peek();
      if (is_op(".")) {
        ++i_;
        if (peek().type != Token::kName && peek().type != Token::kInt) return err("expected an attribute name");
        auto a = make(Expr::Kind::kAttr, at);
        a->name = next().text;
        a->items.push_back(std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        ++i_;
        ExprPtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) {
            PHOTON_ASSIGN_OR_RETURN(parts[k], parse_expr());
          }
          if (k < 2 && is_op(":")) {
            ++i_;
            slice = true;
          } else {
            break;
          }
        }
        PHOTON_RETURN_IF_ERROR(expect_op("]"));
        auto s = make(slice ? Expr::Kind::kSlice : Expr::Kind::kIndex, at);
        s->items.push_back(std::move(e));
        if (slice) {
          for (auto& p : parts) s->items.push_back(std::move(p));
        } else {
          if (!parts[0]) return err("empty subscript");
          s->items.push_back(std::move(parts[0]));
        }
        e = std::move(s);
      } else if (is_op("(")) {
        ++i_;
        auto c = make(Expr::Kind::kCall, at);
        c->items.push_back(std::move(e));
        PHOTON_RETURN_IF_ERROR(parse_args(*c));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> parse_filters(ExprPtr e) {
    while (true) {
      const Token at = peek();
      if (is_op("|")) {
        ++i_;
        if (peek().type != Token::kName) return err("expected a filter name after '|'");
        auto f = make(Expr::Kind::kFilter, at);
        f->name = next().text;
        f->items.push_back(std::move(e));
        if (is_op("(")) {
          ++i_;
          PHOTON_RETURN_IF_ERROR(parse_args(*f));
        }
        PHOTON_ASSIGN_OR_RETURN(e, parse_postfix(std::move(f)));
      } else if (is_name("is")) {
        ++i_;
        auto t = make(Expr::Kind::kTest, at);
        if (is_name("not")) {
          ++i_;
          t->negated = true;
        }
        if (peek().type != Token::kName) return err("expected a test name after 'is'");
        t->name = next().text;
        t->items.push_back(std::move(e));
        if (is_op("(")) {
          ++i_;
          PHOTON_RETURN_IF_ERROR(parse_args(*t));
        } else if (peek().type == Token::kString || peek().type == Token::kInt || peek().type == Token::kFloat ||
                   (peek().type == Token::kName && !is_name("and") && !is_name("or") && !is_name("else") &&
                    !is_name("if") && !is_name("is") && !is_name("in") && !is_name("not"))) {
          PHOTON_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());  // `is equalto 3`, `is sameas x`
          t->items.push_back(std::move(arg));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> parse_primary() {
    const Token at = peek();
    if (at.type == Token::kString) {
      auto e = make(Expr::Kind::kLiteral, at);
      std::string s = next().text;
      while (peek().type == Token::kString) s += next().text;  // adjacent literals concatenate
      e->value = Value(std::move(s));
      return e;
    }
    if (at.type == Token::kInt || at.type == Token::kFloat) {
      auto e = make(Expr::Kind::kLiteral, at);
      const std::string text = next().text;
      if (at.type == Token::kInt) {
        int64_t v = 0;
        std::from_chars(text.data(), text.data() + text.size(), v);
        e->value = Value(v);
      } else {
        e->value = Value(std::stod(text));
      }
      return e;
    }
    if (at.type == Token::kName) {
      const std::string name = next().text;
      auto e = make(Expr::Kind::kLiteral, at);
      if (name == "true" || name == "True") {
        e->value = Value(true);
      } else if (name == "false" || name == "False") {
        e->value = Value(false);
      } else if (name == "none" || name == "None") {
        e->value = Value::none();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = name;
      }
      return e;
    }
    if (is_op("(")) {
      ++i_;
      PHOTON_ASSIGN_OR_RETURN(ExprPtr first, parse_expr());
      if (is_op(",")) {  // a tuple: a list will do
        auto l = make(Expr::Kind::kList, at);
        l->items.push_back(std::move(first));
        while (is_op(",")) {
          ++i_;
          if (is_op(")")) break;
          PHOTON_ASSIGN_OR_RETURN(ExprPtr item, parse_expr());
          l->items.push_back(std::move(item));
        }
        first = std::move(l);
      }
      PHOTON_RETURN_IF_ERROR(expect_op(")"));
      return first;
    }
    if (is_op("[")) {
      ++i_;
      auto l = make(Expr::Kind::kList, at);
      while (!is_op("]")) {
        PHOTON_ASSIGN_OR_RETURN(ExprPtr item, parse_expr());
        l->items.push_back(std::move(item));
        if (is_op(",")) {
          ++i_;
        } else if (!is_op("]")) {
          return err("expected ',' or ']' in the list");
        }
      }
      ++i_;
      return l;
    }
    if (is_op("{")) {
      ++i_;
      auto d = make(Expr::Kind::kDict, at);
      while (!is_op("}")) {
        PHOTON_ASSIGN_OR_RETURN(ExprPtr key, parse_expr());
        PHOTON_RETURN_IF_ERROR(expect_op(":"));
        PHOTON_ASSIGN_OR_RETURN(ExprPtr value, parse_expr());
        d->items.push_back(std::move(key));
        d->items.push_back(std::move(value));
        if (is_op(",")) {
          ++i_;
        } else if (!is_op("}")) {
          return err("expected ',' or '}' in the dict");
        }
      }
      ++i_;
      return d;
    }
    return err(at.type == Token::kVarEnd || at.type == Token::kBlockEnd ? "expected an expression"
                                                                        : fmt::format("unexpected '{}'", at.text));
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Body> parse(std::string_view source) {
  // Like Jinja2 (keep_trailing_newline=False), one newline at the very end of the template is dropped.
  if (source.ends_with('\n')) source.remove_suffix(source.ends_with("\r\n") ? 2 : 1);
  PHOTON_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lexer(source).run());
  return Parser(std::move(tokens)).parse_all();
}

}  // namespace photon::jinja
