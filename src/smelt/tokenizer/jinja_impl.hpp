// Private to jinja_parse.cpp and jinja_eval.cpp: the token list, the syntax tree and the error type.
// Not an API: callers use jinja_render in jinja.hpp.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace smelt::jinja {

using Json = nlohmann::ordered_json;

// Thrown inside the interpreter, caught by jinja_render and returned as a Status.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail_at(int line, int col, const std::string& what);

enum class Tok { kText, kOpenExpr, kCloseExpr, kOpenStmt, kCloseStmt, kName, kString, kInt, kFloat, kOp, kEnd };
struct Token {
  Tok kind;
  std::string text;  // text, name, operator or decoded string literal
  int line = 1, col = 1;
};
std::vector<Token> lex(const std::string& source);

struct Expr;
using ExprP = std::shared_ptr<Expr>;
struct Expr {
  enum Kind { kLit, kName, kList, kDict, kAttr, kIndex, kSlice, kCall, kFilter, kTest, kUnary, kBinary, kCond } kind = kLit;
  std::string s;                                   // name, attribute, operator, filter or test
  Json lit;                                        // kLit
  std::vector<ExprP> a;                            // operands; kDict alternates key, value
  std::vector<std::pair<std::string, ExprP>> kw;   // keyword arguments
  bool neg = false;                                // `is not`
  int line = 1, col = 1;
};

struct Node;
using Body = std::vector<Node>;
struct Node {
  enum Kind { kText, kOut, kIf, kFor, kSet, kSetBlock } kind = kText;
  std::string text;                               // kText; kSet/kSetBlock: the target name
  std::string attr;                               // kSet: `ns.attr`
  ExprP e;                                        // kOut, kSet value, kFor iterable
  ExprP cond;                                     // kFor `if` filter
  std::vector<std::pair<ExprP, Body>> branches;   // kIf
  Body body, else_body;
  std::vector<std::string> targets;               // kFor loop variables
  int line = 1, col = 1;
};
Body parse(const std::vector<Token>& tokens);

}  // namespace smelt::jinja
