// lm-evaluation-harness sample files into Smelt tasks, and tasks into files (harness_samples.hpp).
#include "smelt/eval/harness_samples.hpp"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/common/files.hpp"

namespace smelt {

using json = nlohmann::json;

namespace {

// One request: arg_0 (the context, or a document), arg_1 (a continuation string, a generation's
// settings object, or absent).
struct Request {
  std::string context;
  json arg1;
};

Status line_error(const std::string& file, int64_t line, const std::string& field, const std::string& what) {
  return Status::error(fmt::format("[eval] {} line {}: field \"{}\": {}", file, line, field, what));
}

// "arguments" in either shape, in request order.
Status read_requests(const json& j, const std::string& file, int64_t line, std::vector<Request>& out) {
  out.clear();
  auto it = j.find("arguments");
  if (it == j.end()) return line_error(file, line, "arguments", "missing (is this an lm-evaluation-harness --log_samples file?)");
  std::vector<json> args;
  if (it->is_object()) {
    for (size_t i = 0; i < it->size(); i++) {  // gen_args_0, gen_args_1, ... in number order
      auto a = it->find(fmt::format("gen_args_{}", i));
      if (a == it->end()) return line_error(file, line, "arguments", fmt::format("gen_args_{} missing", i));
      json pair = json::array({a->value("arg_0", json())});
      if (a->contains("arg_1")) pair.push_back((*a)["arg_1"]);
      args.push_back(pair);
    }
  } else if (it->is_array()) {
    for (const auto& a : *it) args.push_back(a.is_array() ? a : json::array({a}));
  } else {
    return line_error(file, line, "arguments", fmt::format("want an object or an array, got {}", it->type_name()));
  }
  if (args.empty()) return line_error(file, line, "arguments", "no request");
  for (size_t i = 0; i < args.size(); i++) {
    if (args[i].empty() || !args[i][0].is_string())
      return line_error(file, line, fmt::format("arguments[{}]", i), "the first argument (the context) is not a string");
    out.push_back(Request{args[i][0].get<std::string>(), args[i].size() > 1 ? args[i][1] : json()});
  }
  return Status::ok();
}

TaskKind kind_of(const std::vector<Request>& r) {
  if (r.size() >= 2) return TaskKind::kMultipleChoice;
  if (r[0].arg1.is_object()) return TaskKind::kGenerate;
  if (r[0].arg1.is_string()) return TaskKind::kLoglikelihood;
  return TaskKind::kPerplexity;
}

// The gold index of a multiple-choice line: "target" as an index (number or digits) or as the
// text of one choice (with or without its leading delimiter).
Status gold_of(const json& j, const std::vector<Request>& r, const std::string& file, int64_t line, int& gold) {
  const json t = j.value("target", json());
  if (t.is_number_integer()) gold = t.get<int>();
  else if (t.is_string() && !t.get<std::string>().empty() &&
           t.get<std::string>().find_first_not_of("0123456789") == std::string::npos)
    gold = std::stoi(t.get<std::string>());
  else if (t.is_string()) {
    gold = -1;
    for (size_t i = 0; i < r.size() && gold < 0; i++) {
      const std::string c = r[i].arg1.get<std::string>();
      if (c == t.get<std::string>() || (!c.empty() && c.substr(1) == t.get<std::string>())) gold = (int)i;
    }
  } else {
    return line_error(file, line, "target", fmt::format("want the right choice's index or text, got {}", t.type_name()));
  }
  if (gold < 0 || gold >= (int)r.size())
    return line_error(file, line, "target", fmt::format("{} is not one of the {} choices", t.dump(), r.size()));
  return Status::ok();
}

Status to_item(const json& j, const std::vector<Request>& r, TaskKind kind, const std::string& file, int64_t line,
               TaskItem& it) {
  it.line = line;
  it.context = r[0].context;
  for (size_t i = 1; i < r.size(); i++)
    if (r[i].context != r[0].context)
      return line_error(file, line, fmt::format("arguments[{}]", i), "a context unlike the first request's");
  switch (kind) {
    case TaskKind::kMultipleChoice:
      for (size_t i = 0; i < r.size(); i++) {
        if (!r[i].arg1.is_string() || r[i].arg1.get<std::string>().empty())
          return line_error(file, line, fmt::format("arguments[{}]", i), "the continuation is not a non-empty string");
        it.choices.push_back(r[i].arg1.get<std::string>());
      }
      return gold_of(j, r, file, line, it.gold);
    case TaskKind::kLoglikelihood: it.continuation = r[0].arg1.get<std::string>(); return Status::ok();
    case TaskKind::kGenerate: {
      const json t = j.value("target", json());
      if (!t.is_string() && !t.is_number()) return line_error(file, line, "target", "want the answer (a string)");
      it.answer = t.is_string() ? t.get<std::string>() : t.dump();
      for (const auto& u : r[0].arg1.value("until", json::array()))
        if (u.is_string()) it.until.push_back(u.get<std::string>());
      return Status::ok();
    }
    case TaskKind::kPerplexity: it.text = r[0].context; it.context.clear(); return Status::ok();
  }
  return Status::ok();
}

// The choices' common leading space moves to the task's target_delimiter, so acc_norm divides by
// the choice text as the harness's doc_to_choice has it.
void split_delimiter(Task& t) {
  t.target_delimiter = "";
  if (t.kind != TaskKind::kMultipleChoice && t.kind != TaskKind::kLoglikelihood) return;
  for (const auto& it : t.items) {
    for (const auto& c : it.choices)
      if (c.size() < 2 || c[0] != ' ') return;
    if (t.kind == TaskKind::kLoglikelihood && (it.continuation.size() < 2 || it.continuation[0] != ' ')) return;
  }
  for (auto& it : t.items) {
    for (auto& c : it.choices) c.erase(0, 1);
    if (t.kind == TaskKind::kLoglikelihood) it.continuation.erase(0, 1);
  }
  t.target_delimiter = " ";
}

}  // namespace

Status harness_samples_read(const std::string& path, Task& t) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(fmt::format("[eval] {}: cannot open the samples file", path));
  t = Task{};
  t.name = std::filesystem::path(path).stem().string();
  if (t.name.rfind("samples_", 0) == 0) t.name = t.name.substr(8);  // samples_TASK_DATE.jsonl
  t.path = path;
  std::string text;
  for (int64_t line = 1; std::getline(in, text); line++) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return Status::error(fmt::format("[eval] {} line {}: not a JSON object", path, line));
    std::vector<Request> r;
    if (Status s = read_requests(j, path, line, r); !s) return s;
    const TaskKind k = kind_of(r);
    if (t.items.empty()) t.kind = k;
    else if (k != t.kind)
      return line_error(path, line, "arguments", fmt::format("a {} request in a {} file", task_kind_name(k),
                                                             task_kind_name(t.kind)));
    TaskItem it;
    if (Status s = to_item(j, r, k, path, line, it); !s) return s;
    t.items.push_back(std::move(it));
  }
  if (t.items.empty()) return Status::error(fmt::format("[eval] {}: no samples", path));
  split_delimiter(t);
  t.metric = t.kind == TaskKind::kMultipleChoice ? "acc_norm" : t.kind == TaskKind::kLoglikelihood ? "acc"
             : t.kind == TaskKind::kGenerate ? "exact_match" : "bits_per_byte";
  t.num_fewshot = 0;
  return Status::ok();
}

Status task_write(const std::string& stem, const Task& t) {
  std::string jsonl;
  for (const auto& it : t.items) {
    json j;
    switch (t.kind) {
      case TaskKind::kMultipleChoice: j = {{"context", it.context}, {"choices", it.choices}, {"gold", it.gold}}; break;
      case TaskKind::kLoglikelihood: j = {{"context", it.context}, {"continuation", it.continuation}}; break;
      case TaskKind::kGenerate:
        j = {{"context", it.context}, {"answer", it.answer}};
        if (!it.until.empty()) j["until"] = it.until;
        break;
      case TaskKind::kPerplexity: j = {{"text", it.text}}; break;
    }
    jsonl += j.dump() + "\n";
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(stem).parent_path(), ec);
  if (Status s = files_write_atomic(stem + ".jsonl", jsonl); !s) return s;
  // JSON strings are valid TOML basic strings for what a task holds (escapes as \uXXXX).
  const std::string toml = fmt::format(
      "[task]\nname = {}\nkind = \"{}\"\nmetric = \"{}\"\nnum_fewshot = {}\ntarget_delimiter = {}\n"
      "fewshot_delimiter = {}\n",
      json(t.name).dump(), task_kind_name(t.kind), t.metric, t.num_fewshot, json(t.target_delimiter).dump(),
      json(t.fewshot_delimiter).dump());
  return files_write_atomic(stem + ".toml", toml);
}

}  // namespace smelt
