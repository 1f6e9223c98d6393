// TOML loading and --set overrides on top of toml++.
#include "smelt/common/config.hpp"

#include "smelt/common/config_schema.hpp"

#include <cstdlib>
#include <cstdint>
#include <sstream>

#include <fmt/format.h>

namespace smelt {

Status config_load(const std::string& path, toml::table& root) {
  if (path.empty()) return Status::ok();
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return Status::error(fmt::format("{} line {} column {}: {}", path, e.source().begin.line,
                                     e.source().begin.column, e.description()));
  }
  return Status::ok();
}

Status config_apply_sets(toml::table& root, const std::vector<std::string>& assignments) {
  for (const auto& a : assignments)
    if (Status s = config_apply_set(root, a); !s) return s;
  return Status::ok();
}

Status config_apply_set(toml::table& root, std::string_view assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return Status::error(fmt::format("--set {}: expected section.key=value", assignment));
  std::string path(assignment.substr(0, eq));
  std::string value(assignment.substr(eq + 1));
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty()) return Status::error(fmt::format("--set {}: empty key in '{}'", assignment, path));
    parts.push_back(p);
  }
  toml::table* t = &root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* n = t->get(parts[i]);
    if (!n) n = &t->insert_or_assign(parts[i], toml::table{}).first->second;
    if (!n->is_table())
      return Status::error(fmt::format("--set {}: '{}' is not a table", assignment, parts[i]));
    t = n->as_table();
  }
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    t->insert_or_assign(parts.back(), value);  // a bare word: take it as a string
    return Status::ok();
  }
  t->insert_or_assign(parts.back(), *parsed.get("v"));
  return Status::ok();
}

ConfigSection::ConfigSection(const toml::table& root, std::string name) : name_(std::move(name)) {
  const toml::table* t = &root;
  std::stringstream ss(name_);
  for (std::string p; std::getline(ss, p, '.');) {
    const toml::node* n = t ? t->get(p) : nullptr;
    if (!n) { t = nullptr; break; }
    if (!n->is_table()) {
      errors_.push_back(fmt::format("[{}] is not a table", name_));
      t = nullptr;
      break;
    }
    t = n->as_table();
  }
  table_ = t;
}

const toml::node* ConfigSection::find(const char* key) {
  seen_.insert(key);
  return table_ ? table_->get(key) : nullptr;
}

void ConfigSection::fail(const char* key, const char* expected) {
  errors_.push_back(fmt::format("[{}] {}: expected {}", name_, key, expected));
}

void ConfigSection::get(const char* key, bool& v) {
  if (auto* n = find(key)) { if (auto x = n->value<bool>()) v = *x; else fail(key, "true or false"); }
  resolved_.insert_or_assign(key, v);
}
void ConfigSection::get(const char* key, int& v) {
  if (auto* n = find(key)) {
    if (n->is_integer()) v = static_cast<int>(*n->value<int64_t>()); else fail(key, "an integer");
  }
  resolved_.insert_or_assign(key, static_cast<int64_t>(v));
}
void ConfigSection::get(const char* key, int64_t& v) {
  if (auto* n = find(key)) { if (n->is_integer()) v = *n->value<int64_t>(); else fail(key, "an integer"); }
  resolved_.insert_or_assign(key, v);
}
void ConfigSection::get(const char* key, uint64_t& v) {
  if (auto* n = find(key)) {
    if (n->is_integer() && *n->value<int64_t>() >= 0) v = static_cast<uint64_t>(*n->value<int64_t>());
    else fail(key, "a non-negative integer");
  }
  resolved_.insert_or_assign(key, static_cast<int64_t>(v));
}
void ConfigSection::get(const char* key, double& v) {
  if (auto* n = find(key)) {
    if (n->is_floating_point() || n->is_integer()) v = *n->value<double>(); else fail(key, "a number");
  }
  resolved_.insert_or_assign(key, v);
}
void ConfigSection::get(const char* key, float& v) {
  double d = v;
  if (auto* n = find(key)) {
    if (n->is_floating_point() || n->is_integer()) d = *n->value<double>(); else fail(key, "a number");
  }
  v = static_cast<float>(d);
  resolved_.insert_or_assign(key, config_float_value(v));
}
double config_float_value(float v) { return std::strtod(fmt::format("{}", v).c_str(), nullptr); }
void ConfigSection::get(const char* key, std::string& v) {
  if (auto* n = find(key)) { if (auto x = n->value<std::string>()) v = *x; else fail(key, "a string"); }
  resolved_.insert_or_assign(key, v);
}
void ConfigSection::get(const char* key, std::vector<std::string>& v) {
  auto* n = find(key);
  if (!n) {
    toml::array a;
    for (const auto& x : v) a.push_back(x);
    resolved_.insert_or_assign(key, std::move(a));
    return;
  }
  const toml::array* a = n->as_array();
  if (!a) { fail(key, "an array of strings"); return; }
  std::vector<std::string> out;
  for (const auto& e : *a) {
    auto x = e.value<std::string>();
    if (!x) { fail(key, "an array of strings"); return; }
    out.push_back(*x);
  }
  v = std::move(out);
  toml::array res;
  for (const auto& x : v) res.push_back(x);
  resolved_.insert_or_assign(key, std::move(res));
}

void ConfigSection::get(const char* key, std::vector<int>& v) {
  auto* n = find(key);
  if (n) {
    const toml::array* a = n->as_array();
    std::vector<int> out;
    for (size_t i = 0; a && i < a->size(); i++) {
      auto x = (*a)[i].value<int64_t>();
      if (!x || *x < INT32_MIN || *x > INT32_MAX) a = nullptr;
      else out.push_back((int)*x);
    }
    if (!a) { fail(key, "an array of integers"); return; }
    v = std::move(out);
  }
  toml::array res;
  for (int x : v) res.push_back((int64_t)x);
  resolved_.insert_or_assign(key, std::move(res));
}

void ConfigSection::get(const char* key, std::vector<double>& v) {
  auto* n = find(key);
  if (n) {
    const toml::array* a = n->as_array();
    std::vector<double> out;
    for (size_t i = 0; a && i < a->size(); i++) {
      auto x = (*a)[i].value<double>();
      if (!x) a = nullptr;
      else out.push_back(*x);
    }
    if (!a) { fail(key, "an array of numbers"); return; }
    v = std::move(out);
  }
  toml::array res;
  for (double x : v) res.push_back(x);
  resolved_.insert_or_assign(key, std::move(res));
}

void config_insert(toml::table& root, const std::string& dotted, const toml::table& t) {
  toml::table* cur = &root;
  std::stringstream ss(dotted);
  std::vector<std::string> parts;
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  for (size_t i = 0; i < parts.size(); ++i) {
    toml::node* n = cur->get(parts[i]);
    if (!n || !n->is_table()) n = &cur->insert_or_assign(parts[i], toml::table{}).first->second;
    cur = n->as_table();
  }
  for (const auto& [k, v] : t) cur->insert_or_assign(k, v);
}

std::vector<std::string> ConfigSection::finish() const {
  std::vector<std::string> errs = errors_;
  if (table_) {
    for (const auto& [k, _] : *table_) {
      if (!seen_.count(std::string(k.str())))
        errs.push_back(fmt::format("[{}] {}: unknown key", name_, k.str()));
    }
  }
  return errs;
}

std::string Limits::text() const {
  const bool has_lo = lo != -HUGE_VAL, has_hi = hi != HUGE_VAL;
  if (!has_lo && !has_hi) return "a number";
  if (!has_hi) return fmt::format("{} {}", lo_open ? ">" : ">=", lo);
  if (!has_lo) return fmt::format("{} {}", hi_open ? "<" : "<=", hi);
  return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
}

std::string config_value_text(const toml::node& n) {
  if (auto s = n.value<std::string>()) return '"' + *s + '"';  // toml++ would write 'text'
  if (const toml::array* a = n.as_array()) {  // toml++'s "[ 1, 2 ]", its strings as above: [ "a", "b" ]
    if (a->empty()) return "[]";
    std::string out = "[ ";
    for (size_t i = 0; i < a->size(); i++) out += (i ? ", " : "") + config_value_text(*a->get(i));
    return out + " ]";
  }
  toml::table t;
  t.insert_or_assign("v", n);
  std::string s = config_to_string(t);  // "v = 3\n"
  s = s.substr(s.find('=') + 2);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::string config_to_string(const toml::table& root) {
  std::stringstream ss;
  // shortest float text (0.7, not 0.69999999999999996), no indentation of sub-tables
  auto flags = (toml::toml_formatter::default_flags | toml::format_flags::relaxed_float_precision) &
               ~toml::format_flags::indent_sub_tables;
  ss << toml::toml_formatter{root, flags};
  return ss.str();
}

}  // namespace smelt
