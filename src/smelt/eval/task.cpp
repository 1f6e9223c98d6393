// Task files: the [task] TOML and the JSONL items, checked line by line (task.hpp, docs/eval.md).
#include "smelt/eval/task.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/common/config.hpp"

namespace smelt {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* task_kind_name(TaskKind k) {
  switch (k) {
    case TaskKind::kMultipleChoice: return "multiple_choice";
    case TaskKind::kLoglikelihood: return "loglikelihood";
    case TaskKind::kGenerate: return "generate";
    case TaskKind::kPerplexity: return "perplexity";
  }
  return "?";
}

namespace {

bool kind_parse(const std::string& s, TaskKind& k) {
  for (TaskKind c : {TaskKind::kMultipleChoice, TaskKind::kLoglikelihood, TaskKind::kGenerate, TaskKind::kPerplexity})
    if (s == task_kind_name(c)) {
      k = c;
      return true;
    }
  return false;
}

const std::vector<std::string>& kind_metrics(TaskKind k) {
  static const std::vector<std::string> mc = {"acc_norm", "acc"}, ll = {"acc", "loglikelihood", "perplexity"},
                                        gen = {"exact_match"},
                                        ppl = {"bits_per_byte", "word_perplexity", "byte_perplexity"};
  switch (k) {
    case TaskKind::kMultipleChoice: return mc;
    case TaskKind::kLoglikelihood: return ll;
    case TaskKind::kGenerate: return gen;
    case TaskKind::kPerplexity: return ppl;
  }
  return mc;
}

// The error of one line: "FILE line N: field "F": what".
Status item_error(const std::string& file, int64_t line, const std::string& field, const std::string& what) {
  if (field.empty()) return Status::error(fmt::format("[eval] {} line {}: {}", file, line, what));
  return Status::error(fmt::format("[eval] {} line {}: field \"{}\": {}", file, line, field, what));
}

Status read_string(const json& j, const char* key, std::string& out, const std::string& file, int64_t line,
                   bool required, bool nonempty = false) {
  auto it = j.find(key);
  if (it == j.end()) return required ? item_error(file, line, key, "missing (want a string)") : Status::ok();
  if (!it->is_string()) return item_error(file, line, key, fmt::format("want a string, got {}", it->type_name()));
  out = it->get<std::string>();
  if (nonempty && out.empty()) return item_error(file, line, key, "empty");
  return Status::ok();
}

Status read_strings(const json& j, const char* key, std::vector<std::string>& out, const std::string& file,
                    int64_t line, bool required) {
  auto it = j.find(key);
  if (it == j.end()) return required ? item_error(file, line, key, "missing (want an array of strings)") : Status::ok();
  if (!it->is_array()) return item_error(file, line, key, fmt::format("want an array of strings, got {}", it->type_name()));
  out.clear();
  for (size_t i = 0; i < it->size(); i++) {
    if (!(*it)[i].is_string())
      return item_error(file, line, fmt::format("{}[{}]", key, i), fmt::format("want a string, got {}", (*it)[i].type_name()));
    out.push_back((*it)[i].get<std::string>());
  }
  return Status::ok();
}

Status parse_choice_item(const json& j, TaskItem& it, const std::string& file) {
  if (Status s = read_string(j, "context", it.context, file, it.line, true); !s) return s;
  if (Status s = read_strings(j, "choices", it.choices, file, it.line, true); !s) return s;
  if (it.choices.size() < 2)
    return item_error(file, it.line, "choices", fmt::format("{} choice(s); a multiple-choice item needs at least 2",
                                                            it.choices.size()));
  for (size_t i = 0; i < it.choices.size(); i++)
    if (it.choices[i].empty()) return item_error(file, it.line, fmt::format("choices[{}]", i), "empty");
  auto g = j.find("gold");
  if (g == j.end()) return item_error(file, it.line, "gold", "missing (want the index of the right choice)");
  if (!g->is_number_integer()) return item_error(file, it.line, "gold", fmt::format("want an integer, got {}", g->type_name()));
  const int64_t gold = g->get<int64_t>();
  if (gold < 0 || gold >= (int64_t)it.choices.size())
    return item_error(file, it.line, "gold", fmt::format("{} is outside the {} choices (0..{})", gold,
                                                         it.choices.size(), it.choices.size() - 1));
  it.gold = (int)gold;
  return Status::ok();
}

Status parse_item(const json& j, TaskKind kind, TaskItem& it, const std::string& file) {
  switch (kind) {
    case TaskKind::kMultipleChoice: return parse_choice_item(j, it, file);
    case TaskKind::kLoglikelihood:
      if (Status s = read_string(j, "context", it.context, file, it.line, true); !s) return s;
      return read_string(j, "continuation", it.continuation, file, it.line, true, true);
    case TaskKind::kGenerate:
      if (Status s = read_string(j, "context", it.context, file, it.line, true); !s) return s;
      if (Status s = read_string(j, "answer", it.answer, file, it.line, true); !s) return s;
      return read_strings(j, "until", it.until, file, it.line, false);
    case TaskKind::kPerplexity: return read_string(j, "text", it.text, file, it.line, true, true);
  }
  return Status::ok();
}

bool kind_infer(const json& j, TaskKind& k) {
  if (j.contains("choices")) k = TaskKind::kMultipleChoice;
  else if (j.contains("continuation")) k = TaskKind::kLoglikelihood;
  else if (j.contains("answer")) k = TaskKind::kGenerate;
  else if (j.contains("text")) k = TaskKind::kPerplexity;
  else return false;
  return true;
}

// Every non-blank line of file as an item of `kind` (infer: the kind from the first line).
Status read_items(const std::string& file, TaskKind& kind, bool infer, std::vector<TaskItem>& out) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::error(fmt::format("[eval] {}: cannot open the task's items", file));
  std::string text;
  int64_t line = 0;
  out.clear();
  while (std::getline(in, text)) {
    line++;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) return item_error(file, line, "", "not valid JSON");
    if (!j.is_object()) return item_error(file, line, "", fmt::format("want a JSON object, got {}", j.type_name()));
    if (infer && out.empty() && !kind_infer(j, kind))
      return item_error(file, line, "", "cannot tell the task's kind: no \"choices\", \"continuation\", \"answer\" or "
                                        "\"text\" field (or give the kind in a .toml beside it)");
    TaskItem it;
    it.line = line;
    if (Status s = parse_item(j, kind, it, file); !s) return s;
    out.push_back(std::move(it));
  }
  if (out.empty()) return Status::error(fmt::format("[eval] {}: no items", file));
  return Status::ok();
}

void read_normalise(ConfigSection& sec, TaskNormalise& n) {
  std::vector<std::string> names = {"strip"};
  sec.get("normalise", names);
  n = TaskNormalise{};
  n.strip = false;
  for (const auto& x : names) {
    if (x == "strip") n.strip = true;
    else if (x == "lower") n.lower = true;
    else if (x == "collapse_spaces") n.collapse_spaces = true;
    else if (x == "strip_punct") n.strip_punct = true;
    else if (x == "first_line") n.first_line = true;
    else sec.error(fmt::format("[task] normalise: \"{}\" is not one of strip, lower, collapse_spaces, strip_punct, "
                               "first_line", x));
  }
}

// The [task] table of a .toml into t (the items path resolved beside it).
Status read_task_toml(const std::string& path, Task& t) {
  toml::table root;
  if (Status s = config_load(path, root); !s) return s;
  ConfigSection sec(root, "task");
  std::string kind, data = fs::path(path).stem().string() + ".jsonl", fewshot;
  sec.get("name", t.name);
  sec.get("kind", kind);
  sec.get("data", data);
  sec.get("fewshot", fewshot);
  sec.get("num_fewshot", t.num_fewshot);
  sec.get("description", t.description);
  sec.get("target_delimiter", t.target_delimiter);
  sec.get("fewshot_delimiter", t.fewshot_delimiter);
  sec.get("metric", t.metric);
  sec.get("until", t.until);
  sec.get("max_gen_tokens", t.max_gen_tokens);
  read_normalise(sec, t.normalise);
  if (!kind.empty() && !kind_parse(kind, t.kind))
    sec.error(fmt::format("[task] kind = \"{}\": want multiple_choice, loglikelihood, generate or perplexity", kind));
  if (t.num_fewshot < 0) sec.error("[task] num_fewshot: must be >= 0");
  if (t.max_gen_tokens < 1) sec.error("[task] max_gen_tokens: must be >= 1");
  for (const auto& k : root) if (k.first.str() != "task") sec.error(fmt::format("[{}]: unknown section (want [task])", k.first.str()));
  if (auto errs = sec.finish(); !errs.empty()) return Status::error(fmt::format("[eval] {}: {}", path, errs.front()));
  const fs::path dir = fs::path(path).parent_path();
  t.toml_path = path;
  t.path = (dir / data).string();
  if (!fewshot.empty()) t.fewshot_path = (dir / fewshot).string();
  if (kind.empty()) return Status::error(fmt::format("[eval] {}: [task] kind is missing (want multiple_choice, "
                                                     "loglikelihood, generate or perplexity)", path));
  return Status::ok();
}

}  // namespace

Status task_load(const std::string& path, Task& out) {
  Task t;
  std::error_code ec;
  const fs::path p(path);
  bool infer = false;
  if (p.extension() == ".toml") {
    if (Status s = read_task_toml(path, t); !s) return s;
  } else if (fs::path beside = fs::path(p).replace_extension(".toml"); fs::exists(beside, ec)) {
    if (Status s = read_task_toml(beside.string(), t); !s) return s;
    t.path = path;
  } else {
    t.path = path;
    infer = true;
  }
  if (t.name.empty()) t.name = p.stem().string();
  if (!fs::is_regular_file(t.path, ec))
    return Status::error(fmt::format("[eval] task {}: items file {} not found", t.name, t.path));
  if (Status s = read_items(t.path, t.kind, infer, t.items); !s) return s;
  const auto& metrics = kind_metrics(t.kind);
  if (t.metric.empty()) t.metric = metrics.front();
  if (std::find(metrics.begin(), metrics.end(), t.metric) == metrics.end())
    return Status::error(fmt::format("[eval] {}: metric \"{}\" is not one of a {} task's ({})",
                                     t.toml_path.empty() ? t.path : t.toml_path, t.metric, task_kind_name(t.kind),
                                     fmt::join(metrics, ", ")));
  if (fs::path split = fs::path(t.path).replace_extension(".fewshot.jsonl"); t.fewshot_path.empty() && fs::exists(split, ec))
    t.fewshot_path = split.string();  // NAME.fewshot.jsonl beside NAME.jsonl: the few-shot split by convention
  if (!t.fewshot_path.empty())
    if (Status s = read_items(t.fewshot_path, t.kind, false, t.fewshot); !s) return s;
  out = std::move(t);
  return Status::ok();
}

Status tasks_load(const std::vector<std::string>& paths, std::vector<Task>& out) {
  out.clear();
  std::vector<std::string> files;
  for (const auto& p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(p, ec)) {
      const fs::path f = e.path();
      if (f.extension() == ".toml") found.push_back(f.string());
      else if (f.extension() == ".jsonl" && f.string().find(".fewshot.") == std::string::npos &&
               !fs::exists(fs::path(f).replace_extension(".toml"), ec))
        found.push_back(f.string());
    }
    if (found.empty()) return Status::error(fmt::format("[eval] {}: no task files (*.toml, *.jsonl) in this folder", p));
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  std::set<std::string> names;
  for (const auto& f : files) {
    Task t;
    if (Status s = task_load(f, t); !s) return s;
    if (!names.insert(t.name).second)
      return Status::error(fmt::format("[eval] {}: a second task named \"{}\" (task names must be unique)", f, t.name));
    out.push_back(std::move(t));
  }
  return Status::ok();
}

double task_chance(const Task& t) {
  if (t.kind != TaskKind::kMultipleChoice || t.items.empty()) return -1;
  double s = 0;
  for (const auto& it : t.items) s += 1.0 / (double)it.choices.size();
  return s / (double)t.items.size();
}

}  // namespace smelt
