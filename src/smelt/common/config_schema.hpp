// One field table per config section (docs/config.md): each key's name, its member in the
// section's struct (whose initializer is the default), the allowed range or enum values and a
// one-line doc. Reading (type checks, unknown keys refused), the per-field validation, the
// resolved table and the docs check (tests/common/config_schema_test.cpp) all walk that table.
// Not the cross-field rules (each stage's validator keeps those) nor TOML loading (config.hpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "smelt/common/config.hpp"
#include "smelt/common/enum_names.hpp"

namespace smelt {

// The interval a numeric key must lie in; either end may be open or absent. note is appended to
// the error in parentheses ("0: every core").
struct Limits {
  double lo = -HUGE_VAL, hi = HUGE_VAL;
  bool lo_open = false, hi_open = false;
  const char* note = "";
  bool any() const { return lo != -HUGE_VAL || hi != HUGE_VAL; }
  bool contains(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);  // NaN is outside
  }
  std::string text() const;  // ">= 0", "> 0", "<= 1", "in [1, 4096]", "in (0, 1]"
};
inline Limits at_least(double lo, const char* note = "") { return {lo, HUGE_VAL, false, false, note}; }
inline Limits above(double lo, const char* note = "") { return {lo, HUGE_VAL, true, false, note}; }
inline Limits in_range(double lo, double hi, const char* note = "") { return {lo, hi, false, false, note}; }
inline Limits finite() { return {-HUGE_VAL, HUGE_VAL, true, true, ""}; }  // any number but NaN/inf

// One key of a section, type-erased over its member's type. Built by field() / field_custom().
template <class S>
struct Field {
  const char* name;
  const char* doc;
  std::string type;     // "integer", "number", "boolean", "string", "array", or the enum's values
  std::string allowed;  // "in [1, 4096]", "\"stop\" or \"continue\"", "" (for messages and docs)
  std::function<void(ConfigSection&, S&)> read;
  std::function<std::string(const S&)> check;  // "" or "key = value: must be ..."
  std::function<void(const S&, toml::table&)> write;
};

namespace schema_detail {

template <class T> struct IsVector : std::false_type {};
template <class T> struct IsVector<std::vector<T>> : std::true_type {};

// The resolved value as ConfigSection writes it (every integer as int64_t, enums as their name).
template <class T>
void put(toml::table& t, const char* key, const T& v) {
  if constexpr (std::is_enum_v<T>) {
    t.insert_or_assign(key, std::string(enum_name(v)));
  } else if constexpr (IsVector<T>::value) {
    toml::array a;
    for (const auto& x : v) {
      if constexpr (std::is_integral_v<typename T::value_type>) a.push_back(static_cast<int64_t>(x));
      else a.push_back(x);
    }
    t.insert_or_assign(key, std::move(a));
  } else if constexpr (std::is_same_v<T, float>) {
    t.insert_or_assign(key, config_float_value(v));
  } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, double> || std::is_same_v<T, std::string>) {
    t.insert_or_assign(key, v);
  } else {
    t.insert_or_assign(key, static_cast<int64_t>(v));
  }
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "boolean";
  else if constexpr (std::is_integral_v<T>) return "integer";
  else if constexpr (std::is_floating_point_v<T>) return "number";
  else if constexpr (std::is_same_v<T, std::string>) return "string";
  else return "array";
}

}  // namespace schema_detail

// A key read into at(s), a reference into the struct for const and non-const s alike (a generic
// lambda: [](auto& s) -> auto& { return s.extract.keep_title; }), for keys of a nested struct.
// Numeric keys may carry limits; enum members take their names from enum_names(E{}).
template <class S, class At>
Field<S> field_at(const char* name, At at, const char* doc, Limits lim = {}) {
  using T = std::remove_cvref_t<decltype(at(std::declval<S&>()))>;
  Field<S> f{name, doc, "", "", {}, {}, {}};
  if constexpr (std::is_enum_v<T>) {
    f.type = enum_allowed<T>();
    f.allowed = f.type;
    f.read = [name, at](ConfigSection& sec, S& s) {
      std::string text = enum_name(at(s));  // absent or not a string: the default's name, which parses
      sec.get(name, text);
      if (!enum_parse(text, at(s)))
        sec.error(fmt::format("[{}] {} = \"{}\": expected {}", sec.name(), name, text, enum_allowed<T>()));
    };
  } else {
    f.type = schema_detail::type_name<T>();
    f.read = [name, at](ConfigSection& sec, S& s) { sec.get(name, at(s)); };
  }
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (lim.any() || lim.lo_open) {
      f.allowed = lim.text();
      f.check = [name, at, lim](const S& s) -> std::string {
        if (lim.contains(static_cast<double>(at(s)))) return "";
        std::string note = *lim.note ? fmt::format(" ({})", lim.note) : "";
        return fmt::format("{} = {}: must be {}{}", name, at(s), lim.text(), note);
      };
    }
  }
  f.write = [name, at](const S& s, toml::table& t) { schema_detail::put(t, name, at(s)); };
  return f;
}

// A key read into s.*m (the usual case).
template <class S, class T>
Field<S> field(const char* name, T S::*m, const char* doc, Limits lim = {}) {
  return field_at<S>(name, [m](auto& s) -> auto& { return s.*m; }, doc, lim);
}

// A key with a reader of its own (a string or an array, a comma list from --set, ...): read gets
// the key's node (nullptr when absent) and returns "" or what was expected; write puts the value.
template <class S>
Field<S> field_custom(const char* name, const char* doc, const char* type,
                      std::function<std::string(const toml::node*, S&)> read,
                      std::function<void(const S&, toml::table&)> write) {
  Field<S> f{name, doc, type, "", {}, {}, std::move(write)};
  f.read = [name, rd = std::move(read)](ConfigSection& sec, S& s) {
    std::string e = rd(sec.node(name), s);
    if (!e.empty()) sec.error(fmt::format("[{}] {}: expected {}", sec.name(), name, e));
  };
  return f;
}

// A section's table: its dotted name, its keys, and the sub-tables that other schemas read.
template <class S>
struct Schema {
  std::string section;  // "train", "health.vitals"
  std::vector<Field<S>> fields;
  std::vector<const char*> nested = {};  // "compression": [dist.compression] has its own schema
};

// Every field's limits; errors read "[section] key = value: must be ...".
template <class S>
void schema_check(const Schema<S>& sc, const S& s, std::vector<std::string>& errors) {
  for (const auto& f : sc.fields)
    if (f.check)
      if (std::string e = f.check(s); !e.empty()) errors.push_back(fmt::format("[{}] {}", sc.section, e));
}

// Reads the section of root into s (absent keys keep s's values); type errors and unknown keys
// into errors. No limits checked (a validator that calls schema_check follows).
template <class S>
void schema_read_keys(const Schema<S>& sc, const toml::table& root, S& s, std::vector<std::string>& errors) {
  ConfigSection sec(root, sc.section);
  for (const auto& f : sc.fields) f.read(sec, s);
  for (const char* n : sc.nested) sec.known(n);
  for (auto& e : sec.finish()) errors.push_back(std::move(e));
}

// schema_read_keys, then every field's limits: the one place a section's keys are validated.
template <class S>
void schema_read(const Schema<S>& sc, const toml::table& root, S& s, std::vector<std::string>& errors) {
  schema_read_keys(sc, root, s, errors);
  schema_check(sc, s, errors);
}

// Errors one per line ("" when none), for the readers that return a Status.
inline Status config_errors_status(const std::vector<std::string>& errors) {
  if (errors.empty()) return Status::ok();
  std::string m = errors[0];
  for (size_t i = 1; i < errors.size(); ++i) m += "\n" + errors[i];
  return Status::error(m);
}

// The section with every key and its value (the resolved config).
template <class S>
toml::table schema_to_toml(const Schema<S>& sc, const S& s) {
  toml::table t;
  for (const auto& f : sc.fields) f.write(s, t);
  return t;
}

// A key as the docs tables show it: the default is S{}'s value as TOML text.
struct FieldDoc {
  std::string name, type, default_text, allowed, doc;
};
std::string config_value_text(const toml::node& n);  // 3, 0.5, true, "text", [1, 2]

template <class S>
std::vector<FieldDoc> schema_docs(const Schema<S>& sc, const S& defaults = S{}) {
  std::vector<FieldDoc> out;
  for (const auto& f : sc.fields) {
    toml::table t;
    f.write(defaults, t);
    out.push_back({f.name, f.type, config_value_text(*t.get(f.name)), f.allowed, f.doc});
  }
  return out;
}

// One section's docs, type-erased (the docs check walks every section of a stage).
struct SectionDoc {
  std::string section;
  std::vector<FieldDoc> fields;
};
template <class S>
SectionDoc section_doc(const Schema<S>& sc, const S& defaults = S{}) {
  return {sc.section, schema_docs(sc, defaults)};
}

}  // namespace smelt
