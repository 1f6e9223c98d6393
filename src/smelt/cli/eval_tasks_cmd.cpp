// `smelt eval --tasks FILE_OR_DIR... (--checkpoint DIR | --gguf FILE)`: downstream tasks scored
// on a model (docs/eval.md): a table for people on stderr, JSON on stdout (and --output), every
// item's record with --samples. Not the task maths (eval/run.hpp), not `smelt eval --data`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "smelt/cli/eval_tasks.hpp"
#include "smelt/cli/load_model.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/progress.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/eval/cloze.hpp"
#include "smelt/eval/harness_samples.hpp"
#include "smelt/eval/run.hpp"
#include "smelt/eval/scorer.hpp"
#include "smelt/eval/task.hpp"

namespace smelt {

namespace {

// The people's table: one row per metric, the headline metric first, chance beside it.
void print_table(const std::vector<TaskResult>& results) {
  std::fprintf(stderr, "%-22s %-16s %7s %7s  %-16s %9s %9s %8s\n", "task", "kind", "items", "fewshot", "metric", "value",
               "stderr", "chance");
  for (const auto& r : results)
    for (size_t i = 0; i < r.metrics.size(); i++) {
      const MetricValue& m = r.metrics[i];
      const std::string chance = i == 0 && r.chance >= 0 ? fmt::format("{:.4f}", r.chance) : "";
      if (i == 0)
        std::fprintf(stderr, "%-22s %-16s %7lld %7d  %-16s %9.4f %9.4f %8s\n", r.name.c_str(), r.kind.c_str(),
                     (long long)r.items, r.fewshot, m.name.c_str(), m.value, m.stderr_, chance.c_str());
      else
        std::fprintf(stderr, "%-22s %-16s %7s %7s  %-16s %9.4f %9.4f %8s\n", "", "", "", "", m.name.c_str(), m.value,
                     m.stderr_, "");
    }
}

// A generated text can end inside a UTF-8 sequence (or a byte-level model make bytes that are not
// UTF-8 at all): such bytes are written as U+FFFD, as the server does, never a failed dump.
Status write_samples(const std::string& path, const std::vector<TaskResult>& results) {
  std::string text;
  for (const auto& r : results)
    for (const auto& s : r.samples) text += s.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return files_write_atomic(path, text);
}

// The documents of one --make-cloze source.
Status cloze_docs(const std::string& src, const Tokenizer* tok, std::vector<std::string>& docs) {
  std::error_code ec;
  if (std::filesystem::exists(src + ".idx", ec)) {
    if (!tok) return Status::error(fmt::format("{}: a token shard: --tokenizer is needed to read its text", src));
    IndexedDataset ds;
    if (Status s = ds.open(src); !s) return s;
    const auto eod = tok->eod_id();
    for (uint64_t i = 0; i < ds.sequences(); i++) {
      const TokenView v = ds.sequence(i);
      std::vector<uint32_t> ids;
      for (size_t k = 0; k < v.size(); k++)
        if (!eod || v.at(k) != *eod) ids.push_back(v.at(k));
      std::string text;
      tok->decode(ids.data(), ids.size(), text);
      docs.push_back(std::move(text));
    }
    return Status::ok();
  }
  std::ifstream in(src, std::ios::binary);
  if (!in) return Status::error(fmt::format("{}: cannot open (want a text file, a .jsonl file or a token shard prefix)", src));
  if (std::filesystem::path(src).extension() != ".jsonl") {
    std::ostringstream all;
    all << in.rdbuf();
    docs.push_back(all.str());
    return Status::ok();
  }
  std::string line;
  for (int64_t n = 1; std::getline(in, line); n++) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string())
      return Status::error(fmt::format("{} line {}: want a JSON object with a string field \"text\"", src, n));
    docs.push_back(j["text"].get<std::string>());
  }
  return Status::ok();
}

}  // namespace

int cli_eval_make_cloze(const EvalClozeFlags& f) {
  std::unique_ptr<Tokenizer> tok;
  if (!f.tokenizer.empty()) {
    tok = std::make_unique<Tokenizer>();
    if (Status s = Tokenizer::load(f.tokenizer, *tok); !s) {
      spdlog::error("--tokenizer {}: {}", f.tokenizer, s.message());
      return kExitFailure;
    }
  }
  std::vector<std::string> docs;
  for (const auto& src : f.from)
    if (Status s = cloze_docs(src, tok.get(), docs); !s) {
      spdlog::error("[eval] --make-cloze {}", s.message());
      return kExitFailure;
    }
  ClozeOptions o;
  o.max_items = f.items;
  o.seed = f.seed;
  std::vector<TaskItem> items;
  if (Status s = cloze_make(docs, o, items); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  const std::string name = std::filesystem::path(f.out).filename().string();
  if (Status s = cloze_write(f.out, name, items); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  std::fprintf(stderr, "eval: cloze task %s: %zu items of %d choices from %zu document(s) -> %s.jsonl, %s.toml\n",
               name.c_str(), items.size(), o.choices, docs.size(), f.out.c_str(), f.out.c_str());
  return kExitOk;
}

int cli_eval_from_harness(const std::string& samples, const std::string& out) {
  Task t;
  if (Status s = harness_samples_read(samples, t); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  t.name = std::filesystem::path(out).filename().string();
  if (Status s = task_write(out, t); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  std::fprintf(stderr, "eval: task %s (%s, %zu items, the harness's prompts as they are) -> %s.jsonl, %s.toml\n",
               t.name.c_str(), task_kind_name(t.kind), t.items.size(), out.c_str(), out.c_str());
  return kExitOk;
}

int cli_eval_tasks(EvalTasksFlags& f) {
  std::vector<Task> tasks;
  if (Status s = tasks_load(f.tasks, tasks); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  LoadedModel m;
  if (Status s = cli_load_model(f.checkpoint, f.gguf, f.tokenizer, m); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  if (!m.tok.eod_id()) {
    spdlog::error("{}: the tokenizer has no end-of-document token (<|endoftext|>), which starts every prompt", m.source);
    return kExitFailure;
  }
  ScorerOptions so;
  if (Status s = weight_format_parse(f.dtype, so.format); !s) {
    spdlog::error("--dtype: {}", s.message());
    return kExitUsage;
  }
  so.threads = f.threads > 0 ? f.threads : (int)std::max(1u, std::thread::hardware_concurrency());
  so.prefix_reuse = !f.no_prefix_reuse;
  so.lora = m.lora.get();  // a LoRA run's checkpoint: its adapters beside its base
  for (const auto& t : tasks)
    for (const auto& it : t.items) so.max_choices = std::max<int>(so.max_choices, (int)it.choices.size());
  so.max_choices = std::min(so.max_choices, 32);
  Scorer sc;
  if (Status s = sc.init(m.cfg, m.params.data(), (int)m.tok.vocab_size(), so); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  EvalRunOptions o;
  o.limit = f.limit;
  o.fewshot = f.fewshot;
  o.seed = f.seed;
  o.samples = !f.samples.empty();
  std::vector<TaskResult> results;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t items = 0;
  for (const auto& t : tasks) {
    Progress progress(fmt::format("eval {}", t.name), 0);
    TaskResult r;
    if (Status s = eval_task(sc, m.tok, t, o, r, [&](int64_t done, int64_t total) {
          progress.tick((uint64_t)done, 0, fmt::format("{}/{} items", done, total));
        }); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
    progress.finish();
    if (r.skipped) spdlog::warn("[eval] task {}: {} item(s) skipped (a continuation longer than the {}-token context)",
                                t.name, r.skipped, sc.ctx());
    items += r.items;
    results.push_back(std::move(r));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "eval %s%s: %zu task(s), %lld items in %.1f s (%.2f items/s), %s weights, prefix reuse %s\n",
               m.source.c_str(), m.step >= 0 ? fmt::format(" (step {})", m.step).c_str() : "", results.size(),
               (long long)items, seconds, seconds > 0 ? items / seconds : 0.0, f.dtype.c_str(),
               so.prefix_reuse ? "on" : "off");
  print_table(results);
  nlohmann::json j = {{"model", m.source}, {"dtype", f.dtype}, {"prefix_reuse", so.prefix_reuse},
                      {"seed", f.seed}, {"threads", so.threads}, {"ctx", sc.ctx()}, {"items", items},
                      {"seconds", seconds}, {"items_per_s", seconds > 0 ? items / seconds : 0.0}};
  j["step"] = m.step >= 0 ? nlohmann::json(m.step) : nlohmann::json(nullptr);
  if (m.lora) j["lora"] = m.lora_source;
  j["tasks"] = nlohmann::json::array();
  for (const auto& r : results) j["tasks"].push_back(task_result_json(r));
  if (!f.samples.empty())
    if (Status s = write_samples(f.samples, results); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  std::printf("%s\n", text.c_str());
  if (!f.output.empty())
    if (Status s = files_write_atomic(f.output, text + "\n"); !s) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
  return kExitOk;
}

}  // namespace smelt
