// Jinja lexer and parser for chat templates: source -> tokens -> statement tree (jinja_impl.hpp).
// lstrip_blocks and trim_blocks as Hugging Face sets them. Not the evaluator (jinja_eval.cpp); filters
// and tests are checked by name here so a refusal names its line and column before anything renders.
#include <cctype>
#include <set>

#include "smelt/tokenizer/jinja_impl.hpp"

namespace smelt::jinja {

void fail_at(int line, int col, const std::string& what) {
  throw Error("chat_template line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
}

namespace {

const std::set<std::string> kFilters = {
    "trim", "upper", "lower", "length", "count", "tojson", "string", "int", "float", "join", "first", "last",
    "default", "d", "list", "items", "capitalize", "title", "replace", "reverse", "selectattr", "rejectattr",
    "map", "unique", "safe", "escape", "e", "abs", "select", "reject"};
const std::set<std::string> kTests = {
    "defined", "undefined", "none", "string", "number", "mapping", "iterable", "sequence", "true", "false",
    "boolean", "integer", "float", "even", "odd", "equalto", "eq", "callable"};

struct Lexer {
  explicit Lexer(const std::string& source) : src(source) {}
  const std::string& src;
  size_t i = 0;
  int line = 1, col = 1;
  std::vector<Token> out;

  void advance(size_t n) {
    for (size_t k = 0; k < n && i < src.size(); ++k, ++i) {
      if (src[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
  }
  bool at(const char* s) const { return src.compare(i, std::char_traits<char>::length(s), s) == 0; }
  void push(Tok kind, std::string text, int l, int c) { out.push_back({kind, std::move(text), l, c}); }

  // Strips trailing whitespace from the last text token (`{%-`), or for lstrip_blocks only the spaces
  // and tabs between a line start and the tag.
  void strip_last_text(bool all_space) {
    if (out.empty() || out.back().kind != Tok::kText) return;
    std::string& t = out.back().text;
    if (all_space) {
      while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
      return;
    }
    size_t k = i, n = 0;
    while (k > 0 && (src[k - 1] == ' ' || src[k - 1] == '\t')) { --k; ++n; }
    if ((k == 0 || src[k - 1] == '\n') && n <= t.size()) t.resize(t.size() - n);
  }
  void skip_ws() {
    while (i < src.size() && std::isspace(static_cast<unsigned char>(src[i]))) advance(1);
  }
  void text_until_tag(bool lstrip_next);
  std::string string_literal();
  void expr_tokens(const char* close, Tok close_kind, bool trim_newline);
  void run();
};

void Lexer::run() {
  bool lstrip_next = false;
  while (i < src.size()) {
    if (at("{{") || at("{%") || at("{#")) {
      int l = line, c = col;
      char kind = src[i + 1];
      bool dash = i + 2 < src.size() && src[i + 2] == '-';
      if (dash) strip_last_text(true);
      else if (kind != '{') strip_last_text(false);
      advance(dash ? 3 : 2);
      if (kind == '#') {
        size_t end = src.find("#}", i);
        if (end == std::string::npos) fail_at(l, c, "the comment is not closed with '#}'");
        bool close_dash = end > i && src[end - 1] == '-';
        advance(end + 2 - i);
        lstrip_next = close_dash;
        if (!close_dash && i < src.size() && src[i] == '\n') advance(1);
        continue;
      }
      push(kind == '{' ? Tok::kOpenExpr : Tok::kOpenStmt, "", l, c);
      expr_tokens(kind == '{' ? "}}" : "%}", kind == '{' ? Tok::kCloseExpr : Tok::kCloseStmt, kind == '%');
      lstrip_next = out.back().text == "-";
      continue;
    }
    text_until_tag(lstrip_next);
    lstrip_next = false;
  }
  push(Tok::kEnd, "", line, col);
}

void Lexer::text_until_tag(bool lstrip_next) {
  if (lstrip_next) skip_ws();
  int l = line, c = col;
  size_t start = i;
  while (i < src.size() && !(at("{{") || at("{%") || at("{#"))) advance(1);
  if (i > start) push(Tok::kText, src.substr(start, i - start), l, c);
}

std::string Lexer::string_literal() {
  char q = src[i];
  int l = line, c = col;
  advance(1);
  std::string s;
  while (i < src.size() && src[i] != q) {
    if (src[i] == '\\' && i + 1 < src.size()) {
      char e = src[i + 1];
      advance(2);
      switch (e) {
        case 'n': s += '\n'; break;
        case 't': s += '\t'; break;
        case 'r': s += '\r'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        default: s += e; break;
      }
      continue;
    }
    s += src[i];
    advance(1);
  }
  if (i >= src.size()) fail_at(l, c, "the string literal is not closed");
  advance(1);
  return s;
}

void Lexer::expr_tokens(const char* close, Tok close_kind, bool trim_newline) {
  static const char* kOps[] = {"//", "==", "!=", "<=", ">=", "**", "+", "-", "*", "/", "%", "~", "<", ">", "=",
                               "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
  int open_line = line, open_col = col;
  for (;;) {
    skip_ws();
    if (i >= src.size()) fail_at(open_line, open_col, std::string("the tag is not closed with '") + close + "'");
    int l = line, c = col;
    bool dash_close = src[i] == '-' && src.compare(i + 1, 2, close) == 0;
    if (dash_close || src.compare(i, 2, close) == 0) {
      advance(dash_close ? 3 : 2);
      push(close_kind, dash_close ? "-" : "", l, c);
      if (!dash_close && trim_newline && i < src.size() && src[i] == '\n') advance(1);
      return;
    }
    char ch = src[i];
    if (ch == '\'' || ch == '"') {
      push(Tok::kString, string_literal(), l, c);
    } else if (std::isdigit(static_cast<unsigned char>(ch))) {
      size_t start = i;
      while (i < src.size() && std::isdigit(static_cast<unsigned char>(src[i]))) advance(1);
      bool is_float = i + 1 < src.size() && src[i] == '.' && std::isdigit(static_cast<unsigned char>(src[i + 1]));
      if (is_float) {
        advance(1);
        while (i < src.size() && std::isdigit(static_cast<unsigned char>(src[i]))) advance(1);
      }
      push(is_float ? Tok::kFloat : Tok::kInt, src.substr(start, i - start), l, c);
    } else if (std::isalpha(static_cast<unsigned char>(ch)) || ch == '_') {
      size_t start = i;
      while (i < src.size() && (std::isalnum(static_cast<unsigned char>(src[i])) || src[i] == '_')) advance(1);
      push(Tok::kName, src.substr(start, i - start), l, c);
    } else {
      bool found = false;
      for (const char* op : kOps) {
        if (at(op)) {
          push(Tok::kOp, op, l, c);
          advance(std::char_traits<char>::length(op));
          found = true;
          break;
        }
      }
      if (!found) fail_at(l, c, std::string("the character '") + ch + "' is not expected here");
    }
  }
}

// Recursive descent, precedence as in Jinja2: cond, or, and, not, compare, + -, ~, * / // %, unary,
// then primary with postfix (. [] ()), filters and tests.
struct Parser {
  explicit Parser(const std::vector<Token>& tokens) : t(tokens) {}
  const std::vector<Token>& t;
  size_t p = 0;

  const Token& cur() const { return t[p]; }
  bool is_op(const char* op) const { return cur().kind == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == Tok::kName && cur().text == n; }
  const Token& next() { return t[p < t.size() - 1 ? p++ : p]; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail_at(cur().line, cur().col, std::string("expected '") + op + "'" + found());
    next();
  }
  std::string found() const {
    if (cur().kind == Tok::kEnd) return " but the template ended";
    if (cur().kind == Tok::kCloseExpr || cur().kind == Tok::kCloseStmt) return " but the tag closed";
    return " but found '" + cur().text + "'";
  }
  std::string expect_name() {
    if (cur().kind != Tok::kName) fail_at(cur().line, cur().col, "expected a name" + found());
    return next().text;
  }
  ExprP make(Expr::Kind k, const Token& at) {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  ExprP expression();
  ExprP or_expr();
  ExprP and_expr();
  ExprP not_expr();
  ExprP compare();
  ExprP add();
  ExprP concat();
  ExprP mul();
  ExprP unary();
  ExprP postfix(ExprP e);
  ExprP primary();
  ExprP filters(ExprP e);
  void call_args(ExprP& e);
  ExprP binary(ExprP l, const Token& at, std::string op, ExprP r) {
    auto e = make(Expr::kBinary, at);
    e->s = std::move(op);
    e->a = {std::move(l), std::move(r)};
    return e;
  }

  Body block(const std::set<std::string>& ends, std::string& ended);
  void statement(Body& body, const std::set<std::string>& ends, std::string& ended);
  Node for_stmt(const Token& at);
  Node set_stmt(const Token& at);
  void close_stmt() {
    if (cur().kind != Tok::kCloseStmt) fail_at(cur().line, cur().col, "expected '%}'" + found());
    next();
  }
};

ExprP Parser::expression() {
  ExprP e = or_expr();
  while (is_name("if")) {
    const Token& at = next();
    auto c = make(Expr::kCond, at);
    ExprP cond = or_expr();
    ExprP other;
    if (is_name("else")) { next(); other = or_expr(); }
    c->a = {e, cond, other};
    e = c;
  }
  return e;
}

ExprP Parser::or_expr() {
  ExprP e = and_expr();
  while (is_name("or")) { const Token& at = next(); e = binary(e, at, "or", and_expr()); }
  return e;
}

ExprP Parser::and_expr() {
  ExprP e = not_expr();
  while (is_name("and")) { const Token& at = next(); e = binary(e, at, "and", not_expr()); }
  return e;
}

ExprP Parser::not_expr() {
  if (is_name("not")) {
    const Token& at = next();
    auto e = make(Expr::kUnary, at);
    e->s = "not";
    e->a = {not_expr()};
    return e;
  }
  return compare();
}

ExprP Parser::compare() {
  ExprP e = add();
  for (;;) {
    const Token& at = cur();
    std::string op;
    if (at.kind == Tok::kOp && (at.text == "==" || at.text == "!=" || at.text == "<" || at.text == ">" ||
                                at.text == "<=" || at.text == ">=")) {
      op = next().text;
    } else if (is_name("in")) {
      next();
      op = "in";
    } else if (is_name("not") && t[p + 1].kind == Tok::kName && t[p + 1].text == "in") {
      next();
      next();
      op = "not in";
    } else {
      return e;
    }
    e = binary(e, at, op, add());
  }
}

ExprP Parser::add() {
  ExprP e = concat();
  while (is_op("+") || is_op("-")) { const Token& at = next(); e = binary(e, at, at.text, concat()); }
  return e;
}

ExprP Parser::concat() {
  ExprP e = mul();
  while (is_op("~")) { const Token& at = next(); e = binary(e, at, "~", mul()); }
  return e;
}

ExprP Parser::mul() {
  ExprP e = unary();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& at = next();
    e = binary(e, at, at.text, unary());
  }
  if (is_op("**")) fail_at(cur().line, cur().col, "the operator '**' is not supported");
  return e;
}

ExprP Parser::unary() {
  if (is_op("-") || is_op("+")) {
    const Token& at = next();
    auto e = make(Expr::kUnary, at);
    e->s = at.text;
    e->a = {unary()};
    return e;
  }
  return filters(postfix(primary()));
}

void Parser::call_args(ExprP& e) {
  expect_op("(");
  while (!is_op(")")) {
    if (cur().kind == Tok::kName && t[p + 1].kind == Tok::kOp && t[p + 1].text == "=") {
      std::string k = next().text;
      next();
      e->kw.emplace_back(k, expression());
    } else {
      e->a.push_back(expression());
    }
    if (!is_op(")")) expect_op(",");
  }
  next();
}

ExprP Parser::postfix(ExprP e) {
  for (;;) {
    const Token& at = cur();
    if (is_op(".")) {
      next();
      auto a = make(Expr::kAttr, at);
      a->s = expect_name();
      a->a = {e};
      e = a;
    } else if (is_op("(")) {
      auto c = make(Expr::kCall, at);
      c->a = {e};
      call_args(c);
      e = c;
    } else if (is_op("[")) {
      next();
      ExprP parts[3];
      int colons = 0;
      while (!is_op("]")) {
        if (is_op(":")) {
          if (++colons > 2) fail_at(cur().line, cur().col, "a slice takes at most two ':'");
          next();
        } else {
          parts[colons] = expression();
        }
      }
      next();
      auto s = make(colons ? Expr::kSlice : Expr::kIndex, at);
      s->a = {e, parts[0], parts[1], parts[2]};
      if (!colons && !parts[0]) fail_at(at.line, at.col, "an empty subscript '[]'");
      e = s;
    } else {
      return e;
    }
  }
}

ExprP Parser::filters(ExprP e) {
  for (;;) {
    const Token& at = cur();
    if (is_op("|")) {
      next();
      const Token& nt = cur();
      auto f = make(Expr::kFilter, nt);
      f->s = expect_name();
      if (!kFilters.count(f->s)) fail_at(nt.line, nt.col, "the filter '" + f->s + "' is not supported");
      f->a = {e};
      if (is_op("(")) call_args(f);
      e = f;
    } else if (is_name("is")) {
      next();
      auto f = make(Expr::kTest, at);
      if (is_name("not")) { next(); f->neg = true; }
      const Token& nt = cur();
      f->s = expect_name();
      if (!kTests.count(f->s)) fail_at(nt.line, nt.col, "the test '" + f->s + "' is not supported");
      f->a = {e};
      if (is_op("(")) {
        call_args(f);
      } else if (cur().kind == Tok::kString || cur().kind == Tok::kInt || cur().kind == Tok::kName) {
        if (f->s == "equalto" || f->s == "eq") f->a.push_back(primary());
      }
      e = f;
    } else {
      return e;
    }
  }
}

ExprP Parser::primary() {
  const Token& at = cur();
  if (at.kind == Tok::kString) {
    auto e = make(Expr::kLit, at);
    e->lit = next().text;
    while (cur().kind == Tok::kString) e->lit = e->lit.get<std::string>() + next().text;  // 'a' 'b'
    return e;
  }
  if (at.kind == Tok::kInt || at.kind == Tok::kFloat) {
    auto e = make(Expr::kLit, at);
    if (at.kind == Tok::kInt) e->lit = std::stoll(at.text); else e->lit = std::stod(at.text);
    next();
    return e;
  }
  if (at.kind == Tok::kName) {
    next();
    auto e = make(Expr::kLit, at);
    if (at.text == "true" || at.text == "True") { e->lit = true; return e; }
    if (at.text == "false" || at.text == "False") { e->lit = false; return e; }
    if (at.text == "none" || at.text == "None") { e->lit = nullptr; return e; }
    e->kind = Expr::kName;
    e->s = at.text;
    return e;
  }
  if (is_op("(")) {
    next();
    ExprP e = expression();
    if (is_op(",")) fail_at(cur().line, cur().col, "tuples '(a, b)' are not supported");
    expect_op(")");
    return e;
  }
  if (is_op("[") || is_op("{")) {
    bool list = is_op("[");
    next();
    auto e = make(list ? Expr::kList : Expr::kDict, at);
    while (!is_op(list ? "]" : "}")) {
      e->a.push_back(expression());
      if (!list) { expect_op(":"); e->a.push_back(expression()); }
      if (!is_op(list ? "]" : "}")) expect_op(",");
    }
    next();
    return e;
  }
  fail_at(at.line, at.col, "expected an expression" + found());
}

Node Parser::for_stmt(const Token& at) {
  Node n;
  n.kind = Node::kFor;
  n.line = at.line;
  n.col = at.col;
  n.targets.push_back(expect_name());
  while (is_op(",")) { next(); n.targets.push_back(expect_name()); }
  if (!is_name("in")) fail_at(cur().line, cur().col, "expected 'in'" + found());
  next();
  n.e = or_expr();
  n.e = filters(n.e);
  if (is_name("if")) { next(); n.cond = expression(); }
  if (is_name("recursive")) fail_at(cur().line, cur().col, "recursive loops are not supported");
  close_stmt();
  std::string ended;
  n.body = block({"else", "endfor"}, ended);
  if (ended == "else") n.else_body = block({"endfor"}, ended);
  return n;
}

Node Parser::set_stmt(const Token& at) {
  Node n;
  n.kind = Node::kSet;
  n.line = at.line;
  n.col = at.col;
  n.text = expect_name();
  if (is_op(".")) { next(); n.attr = expect_name(); }
  if (is_op(",")) fail_at(cur().line, cur().col, "'set a, b = ...' is not supported");
  if (cur().kind == Tok::kCloseStmt && n.attr.empty()) {
    next();
    n.kind = Node::kSetBlock;
    std::string ended;
    n.body = block({"endset"}, ended);
    return n;
  }
  expect_op("=");
  n.e = expression();
  close_stmt();
  return n;
}

void Parser::statement(Body& body, const std::set<std::string>& ends, std::string& ended) {
  next();  // '{%'
  const Token& kw = cur();
  std::string name = expect_name();
  if (ends.count(name)) {
    ended = name;
    if (name != "elif") close_stmt();
    return;
  }
  if (name == "if") {
    Node n;
    n.kind = Node::kIf;
    n.line = kw.line;
    n.col = kw.col;
    std::string end = "elif";
    while (end == "elif") {
      ExprP c = expression();
      close_stmt();
      Body b = block({"elif", "else", "endif"}, end);
      n.branches.emplace_back(c, std::move(b));
    }
    if (end == "else") n.else_body = block({"endif"}, end);
    body.push_back(std::move(n));
  } else if (name == "for") {
    body.push_back(for_stmt(kw));
  } else if (name == "set") {
    body.push_back(set_stmt(kw));
  } else {
    static const std::set<std::string> kClosers = {"endif", "endfor", "endset", "elif", "else"};
    if (kClosers.count(name)) fail_at(kw.line, kw.col, "'" + name + "' without its opening statement");
    fail_at(kw.line, kw.col, "the statement '" + name + "' is not supported");
  }
}

Body Parser::block(const std::set<std::string>& ends, std::string& ended) {
  Body body;
  ended.clear();
  while (ended.empty()) {
    const Token& tk = cur();
    if (tk.kind == Tok::kEnd) {
      if (ends.empty()) return body;
      fail_at(tk.line, tk.col, "the template ended before '{% " + *ends.rbegin() + " %}'");
    }
    if (tk.kind == Tok::kText) {
      Node n;
      n.kind = Node::kText;
      n.text = next().text;
      body.push_back(std::move(n));
    } else if (tk.kind == Tok::kOpenExpr) {
      next();
      Node n;
      n.kind = Node::kOut;
      n.line = tk.line;
      n.col = tk.col;
      n.e = expression();
      if (cur().kind != Tok::kCloseExpr) fail_at(cur().line, cur().col, "expected '}}'" + found());
      next();
      body.push_back(std::move(n));
    } else if (tk.kind == Tok::kOpenStmt) {
      statement(body, ends, ended);
    } else {
      fail_at(tk.line, tk.col, "unexpected '" + tk.text + "'");
    }
  }
  return body;
}

}  // namespace

std::vector<Token> lex(const std::string& source) {
  // As @huggingface/jinja: one trailing newline of the source is dropped.
  std::string src = source;
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Lexer lx(src);
  lx.run();
  return std::move(lx.out);
}

Body parse(const std::vector<Token>& tokens) {
  Parser ps(tokens);
  std::string ended;
  return ps.block({}, ended);
}

}  // namespace smelt::jinja
