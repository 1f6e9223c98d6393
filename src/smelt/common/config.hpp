// TOML configuration: load a file, apply `--set section.key=value` overrides, and read a section
// into a typed struct with type checks and unknown-key errors. The per-section field tables that
// drive it are in config_schema.hpp.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "smelt/common/status.hpp"

namespace smelt {

// Parses FILE into root (an empty path leaves root empty).
Status config_load(const std::string& path, toml::table& root);

// Applies one "a.b.c=value" override; value is parsed as a TOML value, else taken as a string.
Status config_apply_set(toml::table& root, std::string_view assignment);
// Every assignment in order; the first error (its message names the --set) stops.
Status config_apply_sets(toml::table& root, const std::vector<std::string>& assignments);

// A float as the resolved config writes it: the double of its shortest decimal text, so a key
// written 0.95 reads back 0.95 and not 0.949999988079071.
double config_float_value(float v);

// Reads keys of one section into typed fields. Every error names the section and key.
class ConfigSection {
 public:
  ConfigSection(const toml::table& root, std::string name);  // name may be dotted: "prep.quality"

  void get(const char* key, bool& v);
  void get(const char* key, int& v);
  void get(const char* key, int64_t& v);
  void get(const char* key, uint64_t& v);
  void get(const char* key, double& v);
  void get(const char* key, float& v);  // a number, kept as float; resolved as config_float_value
  void get(const char* key, std::string& v);
  void get(const char* key, std::vector<std::string>& v);
  void get(const char* key, std::vector<int>& v);
  void get(const char* key, std::vector<double>& v);  // numbers (integers taken as doubles)
  // Marks a key as known without reading it (a nested table read by another ConfigSection).
  void known(const char* key) { seen_.insert(key); }
  // The key's node (nullptr when absent), marked as known: for readers of their own (config_schema).
  const toml::node* node(const char* key) { return find(key); }
  // An error of the caller's own (a value outside its enum, ...), reported by finish().
  void error(std::string e) { errors_.push_back(std::move(e)); }

  // Errors so far, plus one per key that no get() asked for (typos must not pass silently).
  std::vector<std::string> finish() const;
  const std::string& name() const { return name_; }
  // Every key asked for, with its final value (the default where the file had none).
  const toml::table& resolved() const { return resolved_; }

 private:
  const toml::node* find(const char* key);
  void fail(const char* key, const char* expected);
  const toml::table* table_ = nullptr;
  std::string name_;
  std::set<std::string> seen_;
  std::vector<std::string> errors_;
  toml::table resolved_;
};

// Places table t at the dotted path inside root ("prep.quality"), creating parents.
void config_insert(toml::table& root, const std::string& dotted, const toml::table& t);

// Writes the resolved config as TOML text (for run folders and stats files).
std::string config_to_string(const toml::table& root);

}  // namespace smelt
