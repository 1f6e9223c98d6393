// The docs tables against the field tables (docs/config.md): every key a schema has is in its
// section's table in docs/*.md with the same default, and every key such a table lists is in the
// schema. A mismatch prints the row the docs should have.
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "smelt/cli/pipeline_config.hpp"
#include "smelt/common/config_schema.hpp"
#include "smelt/dataset/loader.hpp"
#include "smelt/model/config.hpp"
#include "smelt/obs/vitals.hpp"
#include "smelt/plan/cluster.hpp"
#include "smelt/refine/prep.hpp"
#include "smelt/train/health.hpp"
#include "smelt/train/train_config.hpp"

namespace smelt {
namespace {

std::string trim(std::string s, const char* chars = " \t`\"'") {
  const size_t a = s.find_first_not_of(chars);
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(chars) - a + 1);
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t k; (k = s.find(sep, at)) != std::string::npos; at = k + sep.size()) out.push_back(s.substr(at, k - at));
  out.push_back(s.substr(at));
  return out;
}

// A default as written in either place, made comparable: no quotes or backticks, no remark in
// parentheses, no spaces in arrays, "—" for an empty string, numbers in one spelling.
std::string normal(std::string v) {
  if (size_t p = v.find(" ("); p != std::string::npos) v = v.substr(0, p);
  v = trim(v);
  if (v == "—" || v == "-") return "";
  if (!v.empty() && v[0] == '[') {
    std::string a;
    for (char ch : v)
      if (ch != ' ' && ch != '"' && ch != '`') a += ch;
    return a;
  }
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (!v.empty() && end && *end == 0) return fmt::format("{}", d);
  return v;
}

using DocRows = std::map<std::pair<std::string, std::string>, std::string>;  // (section, key) -> default

// A table row's cells; \| is a | inside a cell (GitHub's escape, in code spans too).
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> c(1);
  for (size_t i = 0; i < line.size(); i++) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') c.back() += line[++i];
    else if (line[i] == '|') c.emplace_back();
    else c.back() += line[i];
  }
  if (c.size() < 3) return {};
  return std::vector<std::string>(c.begin() + 1, c.end() - 1);
}

// The first table after the line containing `heading` in docs/FILE. Tables with a "section" column
// give each row's section (a blank cell continues the previous one); others are all of `section`.
// A dotted key ("compression.type") belongs to the sub-table.
void read_table(const std::string& file, const std::string& heading, std::string section, DocRows& rows) {
  std::ifstream in(std::string(SMELT_SOURCE_DIR) + "/docs/" + file);
  ASSERT_TRUE(in) << file;
  std::string line;
  while (std::getline(in, line) && line.find(heading) == std::string::npos) {}
  while (std::getline(in, line) && line.rfind("|", 0) != 0) {}
  const bool with_section = trim(cells(line).at(0)) == "section";
  std::getline(in, line);  // |---|
  while (std::getline(in, line) && line.rfind("|", 0) == 0) {
    auto c = cells(line);
    if (with_section) {
      if (std::string s = trim(c[0], " `[]"); !s.empty()) section = s;
      c.erase(c.begin());
    }
    if (c.size() < 2 || trim(c[0]).rfind("see ", 0) == 0) continue;
    auto keys = split(c[0], ",");
    auto defaults = keys.size() > 1 ? split(c[1].substr(0, c[1].find(" (")), ", ") : std::vector<std::string>{c[1]};
    for (size_t i = 0; i < keys.size(); i++) {
      std::string key = trim(keys[i]), sec = section;
      if (size_t dot = key.rfind('.'); dot != std::string::npos) sec += "." + key.substr(0, dot), key = key.substr(dot + 1);
      rows[{sec, key}] = normal(defaults.size() == keys.size() ? defaults[i] : defaults[0]);
    }
  }
}

// Every key of the sections is in rows with its default, and every row of a schema's section is a
// key of that schema.
void check_tables(const DocRows& rows, const std::vector<SectionDoc>& sections) {
  std::map<std::string, std::map<std::string, const FieldDoc*>> schema;
  for (const auto& s : sections)
    for (const auto& f : s.fields) schema[s.section][f.name] = &f;
  for (const auto& [sec, fields] : schema)
    for (const auto& [name, f] : fields) {
      auto it = rows.find({sec, name});
      const std::string want = fmt::format("| `[{}]` | `{}` | {} | {} |", sec, name, f->default_text, f->doc);
      if (it == rows.end()) ADD_FAILURE() << "[" << sec << "] " << name << " is not in the docs; add\n" << want;
      else EXPECT_EQ(it->second, normal(f->default_text)) << "[" << sec << "] " << name << ": the docs' default\n" << want;
    }
  for (const auto& [key, def] : rows) {
    if (auto it = schema.find(key.first); it != schema.end()) {
      EXPECT_TRUE(it->second.count(key.second)) << "the docs list [" << key.first << "] " << key.second
                                                << ", which the schema does not have";
    }
  }
}

TEST(ConfigDocs, TrainTablesMatchTheSchemas) {
  DocRows rows;
  read_table("train.md", "### Sections and keys", "", rows);
  read_table("dist.md", "## `[dist]` keys", "dist", rows);
  read_table("loader.md", "## `[data]` keys", "data", rows);
  read_table("model.md", "## Config (`[model]`)", "model", rows);
  read_table("observability.md", "`[health.vitals]` keys", "health.vitals", rows);
  std::vector<SectionDoc> sections = train_config_docs();
  for (SectionDoc d : {model_config_doc(), loader_config_doc(), health_config_doc(), vitals_config_doc()})
    sections.push_back(d);
  check_tables(rows, sections);
}

// The plan's cluster file (docs/plan.md) and smelt pipeline's own sections (docs/train.md).
TEST(ConfigDocs, PlanAndPipelineTablesMatchTheSchemas) {
  DocRows rows;
  read_table("plan.md", "## Cluster files", "", rows);
  read_table("train.md", "## `smelt pipeline`", "", rows);
  const DocRows::key_type special{"tokenizer", "special_tokens"};  // its default is written <\|endoftext\|>
  EXPECT_EQ(rows[special], "<|endoftext|>");
  std::vector<SectionDoc> sections = cluster_config_docs();
  for (SectionDoc d : pipeline_config_docs()) sections.push_back(d);
  check_tables(rows, sections);
}

TEST(ConfigDocs, NormalFormsAgree) {
  EXPECT_EQ(normal("`\"packed\"`"), "packed");
  EXPECT_EQ(normal("1e-5"), normal("1e-05"));
  EXPECT_EQ(normal("10000"), normal("10000.0"));
  EXPECT_EQ(normal("[ 128, 256 ]"), normal("`[128, 256]`"));
  EXPECT_EQ(normal("5 (a remark)"), "5");
  EXPECT_EQ(normal("—"), normal("\"\""));
}

TEST(ConfigDocs, PrepTablesMatchTheSchemas) {
  DocRows rows;
  read_table("prep.md", "## Configuration keys", "", rows);
  read_table("quality.md", "## Configuration (`[prep.quality]`)", "prep.quality", rows);
  read_table("dedup.md", "## Settings (`[prep.dedup]`)", "prep.dedup", rows);
  check_tables(rows, prep_config_docs());
}

}  // namespace
}  // namespace smelt
