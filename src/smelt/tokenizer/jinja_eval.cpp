// Jinja evaluator for chat templates: walks the tree from jinja_parse.cpp over JSON values and shows
// them as @huggingface/jinja does (true/false, 1.0, lists and dicts as JSON). Not the parser; nothing
// here reads files. Runtime errors (raise_exception, a bad operand) come back as a Status.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

#include "smelt/tokenizer/jinja.hpp"
#include "smelt/tokenizer/jinja_impl.hpp"

namespace smelt::jinja {
namespace {

// A value: undefined, a JSON value, or a namespace (shared, so `set ns.x` is seen by every reference).
struct Value {
  enum Kind { kUndef, kJson, kNs } kind = kUndef;
  Json j;
  std::shared_ptr<Json> ns;
  static Value of(Json v) { Value r; r.kind = kJson; r.j = std::move(v); return r; }
  bool undef() const { return kind == kUndef; }
  const Json& json() const { return kind == kNs ? *ns : j; }
};

std::string float_str(double d) {
  if (d == 0 && std::signbit(d)) return "-0.0";
  if (std::floor(d) == d && std::fabs(d) < 1e21) {
    char b[64];
    std::snprintf(b, sizeof b, "%.1f", d);
    return b;
  }
  char b[64];
  for (int prec = 1; prec <= 17; ++prec) {  // shortest that reads back, as JavaScript prints
    std::snprintf(b, sizeof b, "%.*g", prec, d);
    if (std::strtod(b, nullptr) == d) break;
  }
  return b;
}

// JSON as @huggingface/jinja's toJSON (Python's json.dumps with ensure_ascii=False): ', ' and ': ',
// or with indent ',' and newlines.
void dump(const Json& v, int indent, int depth, std::string& out) {
  if (v.is_number_float()) {
    double d = v.get<double>();
    std::string s = float_str(d);
    if (std::floor(d) == d && s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
    out += s;  // JSON.stringify(1.0) is "1"
    return;
  }
  if (!v.is_array() && !v.is_object()) { out += v.dump(-1, ' ', false, Json::error_handler_t::replace); return; }
  bool arr = v.is_array();
  std::string pad = "\n" + std::string(static_cast<size_t>(indent * depth), ' ');
  std::string child = pad + std::string(static_cast<size_t>(indent), ' ');
  out += arr ? '[' : '{';
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out += indent ? "," : ", ";
    first = false;
    if (indent) out += child;
    if (!arr) { out += Json(it.key()).dump(-1, ' ', false, Json::error_handler_t::replace); out += ": "; }
    dump(*it, indent, depth + 1, out);
  }
  if (indent && !v.empty()) out += pad;
  out += arr ? ']' : '}';
}

std::string to_str(const Value& v) {
  if (v.undef()) return "";
  const Json& j = v.json();
  if (j.is_string()) return j.get<std::string>();
  if (j.is_boolean()) return j.get<bool>() ? "true" : "false";
  if (j.is_null()) return "null";
  if (j.is_number_float()) return float_str(j.get<double>());
  if (j.is_number()) return j.dump();
  std::string s;
  dump(j, 0, 0, s);
  return s;
}

bool truthy(const Value& v) {
  if (v.undef()) return false;
  if (v.kind == Value::kNs) return true;
  const Json& j = v.j;
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_float()) return j.get<double>() != 0;
  if (j.is_number()) return j.get<int64_t>() != 0;
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();
  if (j.is_array() || j.is_object()) return !j.empty();
  return true;
}

// A string's characters (UTF-8 sequences), so length, index and slice count characters as Python does.
std::vector<std::string> chars_of(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t k = i + 1;
    while (k < s.size() && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) ++k;
    out.push_back(s.substr(i, k - i));
    i = k;
  }
  return out;
}

// Elements a `for` or a filter walks: a list's items, a dict's keys, a string's characters.
std::vector<Json> items_of(const Value& v) {
  std::vector<Json> out;
  if (v.undef()) return out;
  const Json& j = v.json();
  if (j.is_array()) for (const auto& x : j) out.push_back(x);
  else if (j.is_object()) for (auto it = j.begin(); it != j.end(); ++it) out.push_back(it.key());
  else if (j.is_string()) for (auto& c : chars_of(j.get_ref<const std::string&>())) out.push_back(c);
  return out;
}

std::string py_strip(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) while (b < e && chars.find(s[b]) != std::string::npos) ++b;
  if (right) while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}
const std::string kSpace = " \t\n\r\f\v";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
  return s;
}

std::string title_case(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    bool word = std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    if (word && start) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    else if (word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    start = !word;
  }
  return out;
}

std::string map_chars(std::string s, int (*f)(int)) {
  for (char& c : s) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

// Python slice semantics over n elements.
std::vector<int64_t> slice_indices(int64_t n, const Value& a, const Value& b, const Value& c) {
  int64_t step = c.undef() || c.j.is_null() ? 1 : c.j.get<int64_t>();
  if (step == 0) throw Error("slice step cannot be zero");
  auto norm = [&](const Value& v, int64_t dflt) {
    if (v.undef() || v.j.is_null()) return dflt;
    int64_t x = v.j.get<int64_t>();
    if (x < 0) x += n;
    return step > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t start = norm(a, step > 0 ? 0 : n - 1), stop = norm(b, step > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(i);
  return idx;
}

class Interp {
 public:
  explicit Interp(const Json& context) { scopes_.emplace_back(); for (auto it = context.begin(); it != context.end(); ++it) scopes_[0][it.key()] = Value::of(*it); }
  void run(const Body& body, std::string& out);

 private:
  std::vector<std::map<std::string, Value>> scopes_;

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value();
  }
  Value eval(const Expr& e);
  Value binary(const Expr& e);
  Value call(const Expr& e);
  Value method(const Expr& e, const std::string& m, const Value& self, const std::vector<Value>& args);
  Value filter(const Expr& e);
  Value filter_list(const Expr& e, const std::string& f, const Value& v, const std::vector<Value>& args);
  bool test(const std::string& name, const Value& v, const std::vector<Value>& args, const Expr& e);
  Value attr(const Value& v, const std::string& key);
  void run_for(const Node& n, std::string& out);
  std::vector<Value> args_of(const Expr& e, size_t from) {
    std::vector<Value> r;
    for (size_t k = from; k < e.a.size(); ++k) r.push_back(eval(*e.a[k]));
    return r;
  }
  Value kwarg(const Expr& e, const std::string& name, const std::vector<Value>& args, size_t pos) {
    for (const auto& [k, v] : e.kw) if (k == name) return eval(*v);
    return pos < args.size() ? args[pos] : Value();
  }
};

Value Interp::attr(const Value& v, const std::string& key) {
  if (v.undef()) return Value();
  const Json& j = v.json();
  if (j.is_object()) {
    auto it = j.find(key);
    return it == j.end() ? Value() : Value::of(*it);
  }
  if (j.is_array() && key == "length") return Value::of(j.size());
  return Value();
}

Value Interp::eval(const Expr& e) {
  switch (e.kind) {
    case Expr::kLit: return Value::of(e.lit);
    case Expr::kName: return lookup(e.s);
    case Expr::kList: {
      Json a = Json::array();
      for (const auto& x : e.a) a.push_back(eval(*x).json());
      return Value::of(a);
    }
    case Expr::kDict: {
      Json o = Json::object();
      for (size_t k = 0; k + 1 < e.a.size(); k += 2) o[to_str(eval(*e.a[k]))] = eval(*e.a[k + 1]).json();
      return Value::of(o);
    }
    case Expr::kAttr: return attr(eval(*e.a[0]), e.s);
    case Expr::kIndex: {
      Value v = eval(*e.a[0]), k = eval(*e.a[1]);
      if (v.undef() || k.undef()) return Value();
      const Json& j = v.json();
      if (k.j.is_string()) return attr(v, k.j.get<std::string>());
      if (!k.j.is_number_integer() || !(j.is_array() || j.is_string())) return Value();
      std::vector<std::string> cs = j.is_string() ? chars_of(j.get_ref<const std::string&>()) : std::vector<std::string>();
      int64_t n = j.is_array() ? static_cast<int64_t>(j.size()) : static_cast<int64_t>(cs.size());
      int64_t i = k.j.get<int64_t>();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      return j.is_array() ? Value::of(j[static_cast<size_t>(i)]) : Value::of(cs[static_cast<size_t>(i)]);
    }
    case Expr::kSlice: {
      Value v = eval(*e.a[0]);
      Value s[3];
      for (int k = 0; k < 3; ++k) if (e.a[k + 1]) s[k] = eval(*e.a[k + 1]);
      if (v.undef()) return Value();
      const Json& j = v.json();
      bool str = j.is_string();
      if (!str && !j.is_array()) fail_at(e.line, e.col, "only lists and strings can be sliced");
      std::vector<std::string> cs = str ? chars_of(j.get_ref<const std::string&>()) : std::vector<std::string>();
      int64_t n = str ? static_cast<int64_t>(cs.size()) : static_cast<int64_t>(j.size());
      std::string rs;
      Json ra = Json::array();
      for (int64_t i : slice_indices(n, s[0], s[1], s[2])) {
        if (str) rs += cs[static_cast<size_t>(i)];
        else ra.push_back(j[static_cast<size_t>(i)]);
      }
      return str ? Value::of(rs) : Value::of(ra);
    }
    case Expr::kCall: return call(e);
    case Expr::kFilter: return filter(e);
    case Expr::kTest: {
      Value v = eval(*e.a[0]);
      bool r = test(e.s, v, args_of(e, 1), e);
      return Value::of(e.neg ? !r : r);
    }
    case Expr::kUnary: {
      Value v = eval(*e.a[0]);
      if (e.s == "not") return Value::of(!truthy(v));
      if (!v.j.is_number()) fail_at(e.line, e.col, "unary '" + e.s + "' needs a number");
      if (e.s == "+") return v;
      return v.j.is_number_float() ? Value::of(-v.j.get<double>()) : Value::of(-v.j.get<int64_t>());
    }
    case Expr::kBinary: return binary(e);
    case Expr::kCond: {
      if (truthy(eval(*e.a[1]))) return eval(*e.a[0]);
      return e.a[2] ? eval(*e.a[2]) : Value();
    }
  }
  return Value();
}

bool contains(const Value& hay, const Value& needle) {
  if (hay.undef()) return false;
  const Json& h = hay.json();
  const Json& n = needle.json();
  if (h.is_string()) return n.is_string() && h.get_ref<const std::string&>().find(n.get<std::string>()) != std::string::npos;
  if (h.is_array()) return std::find(h.begin(), h.end(), n) != h.end();
  if (h.is_object()) return n.is_string() && h.contains(n.get<std::string>());
  return false;
}

Value arith(const Expr& e, const Json& l, const Json& r) {
  if (!l.is_number() || !r.is_number() || l.is_boolean() || r.is_boolean())
    fail_at(e.line, e.col, "the operator '" + e.s + "' needs numbers here");
  bool ints = l.is_number_integer() && r.is_number_integer();
  double a = l.get<double>(), b = r.get<double>();
  const std::string& op = e.s;
  if ((op == "/" || op == "//" || op == "%") && b == 0) fail_at(e.line, e.col, "division by zero");
  if (op == "/") return Value::of(a / b);
  if (ints) {
    int64_t x = l.get<int64_t>(), y = r.get<int64_t>();
    if (op == "+") return Value::of(x + y);
    if (op == "-") return Value::of(x - y);
    if (op == "*") return Value::of(x * y);
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;  // Python floors
    return op == "//" ? Value::of(q) : Value::of(x - q * y);
  }
  if (op == "+") return Value::of(a + b);
  if (op == "-") return Value::of(a - b);
  if (op == "*") return Value::of(a * b);
  if (op == "//") return Value::of(std::floor(a / b));
  return Value::of(a - std::floor(a / b) * b);
}

Value Interp::binary(const Expr& e) {
  const std::string& op = e.s;
  Value l = eval(*e.a[0]);
  if (op == "and") return truthy(l) ? eval(*e.a[1]) : l;
  if (op == "or") return truthy(l) ? l : eval(*e.a[1]);
  Value r = eval(*e.a[1]);
  if (op == "in") return Value::of(contains(r, l));
  if (op == "not in") return Value::of(!contains(r, l));
  if (op == "~") return Value::of(to_str(l) + to_str(r));
  const Json& lj = l.json();
  const Json& rj = r.json();
  if (op == "==") return Value::of(l.undef() == r.undef() && lj == rj);
  if (op == "!=") return Value::of(!(l.undef() == r.undef() && lj == rj));
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    bool ok = (lj.is_number() && rj.is_number()) || (lj.is_string() && rj.is_string());
    if (!ok || l.undef() || r.undef()) fail_at(e.line, e.col, "'" + op + "' compares two numbers or two strings");
    bool lt = lj < rj, gt = rj < lj;
    return Value::of(op == "<" ? lt : op == ">" ? gt : op == "<=" ? !gt : !lt);
  }
  if (op == "+" && (lj.is_string() || rj.is_string()) && !l.undef() && !r.undef()) return Value::of(to_str(l) + to_str(r));
  if (op == "+" && lj.is_array() && rj.is_array()) {
    Json a = lj;
    for (const auto& x : rj) a.push_back(x);
    return Value::of(a);
  }
  if (l.undef() || r.undef()) fail_at(e.line, e.col, "the operator '" + op + "' got an undefined operand");
  return arith(e, lj, rj);
}

Value Interp::call(const Expr& e) {
  const Expr& callee = *e.a[0];
  std::vector<Value> args = args_of(e, 1);
  if (callee.kind == Expr::kAttr) return method(e, callee.s, eval(*callee.a[0]), args);
  if (callee.kind != Expr::kName) fail_at(e.line, e.col, "only named functions and methods can be called");
  const std::string& f = callee.s;
  if (f == "raise_exception") throw Error(args.empty() ? std::string("raise_exception") : to_str(args[0]));
  if (f == "range") {
    std::vector<int64_t> n;
    for (const auto& a : args) {
      if (!a.j.is_number_integer()) fail_at(e.line, e.col, "range() takes integers");
      n.push_back(a.j.get<int64_t>());
    }
    if (n.empty() || n.size() > 3) fail_at(e.line, e.col, "range() takes 1 to 3 integers");
    int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0], step = n.size() > 2 ? n[2] : 1;
    if (step == 0) fail_at(e.line, e.col, "range() step cannot be zero");
    Json r = Json::array();
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) r.push_back(i);
    return Value::of(r);
  }
  if (f == "namespace") {
    Value v;
    v.kind = Value::kNs;
    v.ns = std::make_shared<Json>(Json::object());
    for (const auto& [k, x] : e.kw) (*v.ns)[k] = eval(*x).json();
    return v;
  }
  if (f == "strftime_now") {
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    std::string fmt = args.empty() ? "" : to_str(args[0]);
    size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return Value::of(std::string(buf, n));
  }
  fail_at(callee.line, callee.col, "the function '" + f + "' is not supported");
}

Value Interp::method(const Expr& e, const std::string& m, const Value& self, const std::vector<Value>& args) {
  const Json& j = self.json();
  auto arg_str = [&](size_t k, const std::string& dflt) { return k < args.size() && !args[k].undef() && !args[k].j.is_null() ? to_str(args[k]) : dflt; };
  if (!self.undef() && j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (m == "strip" || m == "lstrip" || m == "rstrip")
      return Value::of(py_strip(s, arg_str(0, kSpace), m != "rstrip", m != "lstrip"));
    if (m == "upper") return Value::of(map_chars(s, ::toupper));
    if (m == "lower") return Value::of(map_chars(s, ::tolower));
    if (m == "title") return Value::of(title_case(s));
    if (m == "startswith") return Value::of(s.rfind(arg_str(0, ""), 0) == 0);
    if (m == "endswith") {
      std::string x = arg_str(0, "");
      return Value::of(s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
    }
    if (m == "replace") return Value::of(replace_all(s, arg_str(0, ""), arg_str(1, "")));
    if (m == "split") {
      Json r = Json::array();
      if (args.empty() || args[0].j.is_null()) {
        size_t i = 0;
        while (true) {
          while (i < s.size() && kSpace.find(s[i]) != std::string::npos) ++i;
          if (i >= s.size()) break;
          size_t k = i;
          while (k < s.size() && kSpace.find(s[k]) == std::string::npos) ++k;
          r.push_back(s.substr(i, k - i));
          i = k;
        }
        return Value::of(r);
      }
      std::string sep = to_str(args[0]);
      if (sep.empty()) fail_at(e.line, e.col, "split() got an empty separator");
      int64_t maxsplit = args.size() > 1 && args[1].j.is_number_integer() ? args[1].j.get<int64_t>() : -1;
      size_t pos = 0, k;
      while ((maxsplit < 0 || static_cast<int64_t>(r.size()) < maxsplit) && (k = s.find(sep, pos)) != std::string::npos) {
        r.push_back(s.substr(pos, k - pos));
        pos = k + sep.size();
      }
      r.push_back(s.substr(pos));
      return Value::of(r);
    }
  }
  if (!self.undef() && j.is_object()) {
    if (m == "items") {
      Json r = Json::array();
      for (auto it = j.begin(); it != j.end(); ++it) r.push_back(Json::array({it.key(), *it}));
      return Value::of(r);
    }
    if (m == "keys" || m == "values") {
      Json r = Json::array();
      for (auto it = j.begin(); it != j.end(); ++it) r.push_back(m == "keys" ? Json(it.key()) : *it);
      return Value::of(r);
    }
    if (m == "get") {
      Value v = attr(self, arg_str(0, ""));
      return v.undef() ? (args.size() > 1 ? args[1] : Value::of(nullptr)) : v;
    }
  }
  fail_at(e.line, e.col, "the method '" + m + "' is not supported on this value");
}

bool Interp::test(const std::string& name, const Value& v, const std::vector<Value>& args, const Expr& e) {
  const Json& j = v.json();
  bool def = !v.undef();
  if (name == "defined") return def;
  if (name == "undefined") return !def;
  if (name == "none") return def && j.is_null();
  if (name == "string") return def && j.is_string();
  if (name == "number") return def && j.is_number();
  if (name == "integer") return def && j.is_number_integer();
  if (name == "float") return def && j.is_number_float();
  if (name == "boolean") return def && j.is_boolean();
  if (name == "true") return def && j.is_boolean() && j.get<bool>();
  if (name == "false") return def && j.is_boolean() && !j.get<bool>();
  if (name == "mapping") return def && j.is_object();
  if (name == "iterable") return def && (j.is_array() || j.is_string() || j.is_object());
  if (name == "sequence") return def && (j.is_array() || j.is_string() || j.is_object());
  if (name == "callable") return false;
  if (name == "even" || name == "odd") {
    if (!def || !j.is_number_integer()) fail_at(e.line, e.col, "the test '" + name + "' needs an integer");
    return (j.get<int64_t>() % 2 == 0) == (name == "even");
  }
  if (name == "equalto" || name == "eq") return def && !args.empty() && !args[0].undef() && j == args[0].json();
  fail_at(e.line, e.col, "the test '" + name + "' is not supported");
}

Value Interp::filter(const Expr& e) {
  Value v = eval(*e.a[0]);
  std::vector<Value> args = args_of(e, 1);
  const std::string& f = e.s;
  const Json& j = v.json();
  if (f == "safe") return v;
  if (f == "default" || f == "d") {
    bool boolean = truthy(kwarg(e, "boolean", args, 1));
    bool use = v.undef() || (boolean && !truthy(v));
    return use ? (args.empty() ? Value::of("") : args[0]) : v;
  }
  if (f == "tojson") {
    Value ind = kwarg(e, "indent", args, 0);
    std::string out;
    if (v.undef()) return Value::of("null");
    dump(j, ind.undef() || !ind.j.is_number_integer() ? 0 : static_cast<int>(ind.j.get<int64_t>()), 0, out);
    return Value::of(out);
  }
  if (f == "string") return Value::of(to_str(v));
  if (f == "length" || f == "count") {
    if (v.undef()) return Value::of(0);
    if (j.is_string()) return Value::of(chars_of(j.get_ref<const std::string&>()).size());
    if (j.is_array() || j.is_object()) return Value::of(j.size());
    fail_at(e.line, e.col, "the filter '" + f + "' needs a string, list or dict");
  }
  if (f == "int" || f == "float") {
    double d = 0;
    if (j.is_number()) d = j.get<double>();
    else if (j.is_string()) d = std::strtod(j.get_ref<const std::string&>().c_str(), nullptr);
    else if (j.is_boolean()) d = j.get<bool>();
    if (f == "int") return Value::of(j.is_number_integer() ? j.get<int64_t>() : static_cast<int64_t>(std::trunc(d)));
    return Value::of(d);
  }
  if (f == "abs") {
    if (!j.is_number()) fail_at(e.line, e.col, "the filter 'abs' needs a number");
    return j.is_number_integer() ? Value::of(std::llabs(j.get<int64_t>())) : Value::of(std::fabs(j.get<double>()));
  }
  if (j.is_string() && !v.undef()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (f == "trim") return Value::of(py_strip(s, kSpace, true, true));
    if (f == "upper") return Value::of(map_chars(s, ::toupper));
    if (f == "lower") return Value::of(map_chars(s, ::tolower));
    if (f == "title") return Value::of(title_case(s));
    if (f == "capitalize") {
      std::string r = map_chars(s, ::tolower);
      if (!r.empty()) r[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(r[0])));
      return Value::of(r);
    }
    if (f == "replace") return Value::of(replace_all(s, args.size() > 0 ? to_str(args[0]) : "", args.size() > 1 ? to_str(args[1]) : ""));
    if (f == "escape" || f == "e") {
      std::string r;
      for (char c : s) {
        switch (c) {
          case '&': r += "&amp;"; break;
          case '<': r += "&lt;"; break;
          case '>': r += "&gt;"; break;
          case '"': r += "&#34;"; break;
          case '\'': r += "&#39;"; break;
          default: r += c;
        }
      }
      return Value::of(r);
    }
  }
  return filter_list(e, f, v, args);
}

Value Interp::filter_list(const Expr& e, const std::string& f, const Value& v, const std::vector<Value>& args) {
  const Json& j = v.json();
  if (f == "items") {
    if (!j.is_object() || v.undef()) fail_at(e.line, e.col, "the filter 'items' needs a dict");
    return method(e, "items", v, {});
  }
  std::vector<Json> xs = items_of(v);
  bool str = !v.undef() && j.is_string();
  if (v.undef() || !(j.is_array() || j.is_string() || j.is_object()))
    fail_at(e.line, e.col, "the filter '" + f + "' is not supported on this value");
  if (f == "list") return Value::of(Json(xs));
  if (f == "first" || f == "last") {
    if (xs.empty()) return Value();
    return Value::of(f == "first" ? xs.front() : xs.back());
  }
  if (f == "reverse") {
    std::reverse(xs.begin(), xs.end());
    if (!str) return Value::of(Json(xs));
    std::string r;
    for (const auto& x : xs) r += x.get<std::string>();
    return Value::of(r);
  }
  if (f == "join") {
    std::string sep = args.empty() ? "" : to_str(args[0]), r;
    for (size_t k = 0; k < xs.size(); ++k) r += (k ? sep : "") + to_str(Value::of(xs[k]));
    return Value::of(r);
  }
  if (f == "unique") {
    Json r = Json::array();
    for (const auto& x : xs) if (std::find(r.begin(), r.end(), x) == r.end()) r.push_back(x);
    return Value::of(r);
  }
  if (f == "map") {
    Value a = kwarg(e, "attribute", args, 99);
    if (a.undef()) fail_at(e.line, e.col, "the filter 'map' is supported only as map(attribute=...)");
    Json r = Json::array();
    for (const auto& x : xs) { Value y = attr(Value::of(x), to_str(a)); r.push_back(y.undef() ? Json() : y.j); }
    return Value::of(r);
  }
  if (f == "selectattr" || f == "rejectattr") {
    if (args.empty()) fail_at(e.line, e.col, "the filter '" + f + "' needs an attribute name");
    std::string name = to_str(args[0]);
    Json r = Json::array();
    for (const auto& x : xs) {
      Value y = attr(Value::of(x), name);
      bool keep = args.size() < 2 ? truthy(y) : test(to_str(args[1]), y, {args.begin() + 2, args.end()}, e);
      if (keep == (f == "selectattr")) r.push_back(x);
    }
    return Value::of(r);
  }
  if (f == "select" || f == "reject") {
    Json r = Json::array();
    for (const auto& x : xs) {
      bool keep = args.empty() ? truthy(Value::of(x)) : test(to_str(args[0]), Value::of(x), {args.begin() + 1, args.end()}, e);
      if (keep == (f == "select")) r.push_back(x);
    }
    return Value::of(r);
  }
  fail_at(e.line, e.col, "the filter '" + f + "' is not supported on this value");
}

void Interp::run_for(const Node& n, std::string& out) {
  std::vector<Json> all = items_of(eval(*n.e)), xs;
  scopes_.emplace_back();
  for (const auto& x : all) {  // `for x in xs if cond`: filtered first, so loop.length counts what remains
    if (!n.cond) { xs.push_back(x); continue; }
    scopes_.back()[n.targets[0]] = Value::of(x);
    if (truthy(eval(*n.cond))) xs.push_back(x);
  }
  size_t len = xs.size();
  for (size_t i = 0; i < len; ++i) {
    auto& scope = scopes_.back();
    if (n.targets.size() == 1) {
      scope[n.targets[0]] = Value::of(xs[i]);
    } else {
      if (!xs[i].is_array() || xs[i].size() != n.targets.size())
        fail_at(n.line, n.col, "cannot unpack the item into " + std::to_string(n.targets.size()) + " names");
      for (size_t k = 0; k < n.targets.size(); ++k) scope[n.targets[k]] = Value::of(xs[i][k]);
    }
    Json loop = {{"index", i + 1}, {"index0", i}, {"first", i == 0}, {"last", i + 1 == len}, {"length", len},
                 {"revindex", len - i}, {"revindex0", len - i - 1}};
    if (i > 0) loop["previtem"] = xs[i - 1];
    if (i + 1 < len) loop["nextitem"] = xs[i + 1];
    scope["loop"] = Value::of(loop);
    run(n.body, out);
  }
  scopes_.pop_back();
  if (len == 0) run(n.else_body, out);
}

void Interp::run(const Body& body, std::string& out) {
  for (const Node& n : body) {
    switch (n.kind) {
      case Node::kText: out += n.text; break;
      case Node::kOut: {
        Value v = eval(*n.e);
        if (!v.undef() && !(v.kind == Value::kJson && v.j.is_null())) out += to_str(v);
        break;
      }
      case Node::kIf: {
        bool done = false;
        for (const auto& [c, b] : n.branches) {
          if (truthy(eval(*c))) { run(b, out); done = true; break; }
        }
        if (!done) run(n.else_body, out);
        break;
      }
      case Node::kFor: run_for(n, out); break;
      case Node::kSet: {
        Value v = eval(*n.e);
        if (n.attr.empty()) { scopes_.back()[n.text] = v; break; }
        Value ns = lookup(n.text);
        if (ns.kind != Value::kNs) fail_at(n.line, n.col, "'set " + n.text + "." + n.attr + "' needs a namespace()");
        (*ns.ns)[n.attr] = v.json();
        break;
      }
      case Node::kSetBlock: {
        std::string captured;
        run(n.body, captured);
        scopes_.back()[n.text] = Value::of(captured);
        break;
      }
    }
  }
}

}  // namespace
}  // namespace smelt::jinja

namespace smelt {

Status JinjaTemplate::parse(const std::string& source, JinjaTemplate& out) {
  out.body_.reset();
  try {
    out.body_ = std::make_shared<const jinja::Body>(jinja::parse(jinja::lex(source)));
  } catch (const std::exception& e) {
    return Status::error(e.what());
  }
  return Status::ok();
}

Status JinjaTemplate::render(const nlohmann::ordered_json& context, std::string& out) const {
  out.clear();
  if (!body_) return Status::error("chat_template: no template parsed");
  try {
    jinja::Interp interp(context.is_object() ? context : jinja::Json::object());
    interp.run(*body_, out);
  } catch (const std::exception& e) {
    out.clear();
    return Status::error(e.what());
  }
  return Status::ok();
}

Status jinja_render(const std::string& source, const nlohmann::ordered_json& context, std::string& out) {
  out.clear();
  JinjaTemplate t;
  if (Status s = JinjaTemplate::parse(source, t); !s) return s;
  return t.render(context, out);
}

}  // namespace smelt
