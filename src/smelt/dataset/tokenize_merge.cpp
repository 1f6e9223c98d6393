// `smelt tokenize merge`: check the parts agree, lay out the order (input order for the tasks of one
// split, the given order with --concat), copy the sequences and their ids, write the merged stats.
#include "smelt/dataset/tokenize_merge.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/common/files.hpp"
#include "smelt/common/log.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/lineage.hpp"
#include "smelt/dataset/tokenize.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {

namespace {

struct Part {
  std::string prefix;
  json stats;
  IndexedDataset tokens;
  LineageReader ids;
};

// A run of consecutive sequences of one part.
struct Segment {
  size_t part = 0;
  uint64_t first = 0, count = 0;
};

// "out/t-00001.idx" -> "out/t-00001"; a prefix stays as it is.
std::string prefix_of(const std::string& arg) {
  for (const char* ext : {".stats.json", ".bin", ".idx", ".docs"}) {
    const std::string e = ext;
    if (arg.size() > e.size() && arg.compare(arg.size() - e.size(), e.size(), e) == 0)
      return arg.substr(0, arg.size() - e.size());
  }
  return arg;
}

Status open_part(const std::string& prefix, Part& p) {
  p.prefix = prefix;
  const std::string stats = tokenize_stats_path(prefix);
  std::string text;
  if (!fs::exists(stats))
    return Status::error(fmt::format("{}: not found; is {} the prefix of a complete `smelt tokenize` output?", stats,
                                     prefix));
  if (Status s = files_read_small(stats, text); !s) return s;
  p.stats = json::parse(text, nullptr, false);
  if (!p.stats.is_object() || p.stats.value("stage", "") != "tokenize" || !p.stats.value("complete", false))
    return Status::error(fmt::format("{}: not the stats of a complete `smelt tokenize` run", stats));
  if (Status s = p.tokens.open(prefix); !s) return s;
  if (Status s = p.ids.open(lineage_path(prefix)); !s) return s;
  const uint64_t want = p.stats.value("sequences", uint64_t{0});
  if (p.tokens.sequences() != want || p.ids.size() != want)
    return Status::error(fmt::format("{}: {}.idx holds {} sequences and {} {} ids, the stats say {}", prefix, prefix,
                                     p.tokens.sequences(), lineage_path(prefix), p.ids.size(), want));
  return Status::ok();
}

// What every part must share for one shard to hold them: the tokenizer and the settings.
json settings_of(const json& st) {
  json s = {{"tokenizer content_hash", st.at("tokenizer").value("content_hash", "")},
            {"tokenizer vocab_size", st.at("tokenizer").value("vocab_size", 0)},
            {"dtype", st.value("dtype", "")},
            {"append_eod", st.value("append_eod", false)},
            {"text_field", st.value("text_field", "")}};
  s["holdout"] = st.contains("holdout") ? json::array({st["holdout"]["fraction"], st["holdout"]["side"]}) : json();
  s["languages"] = st.contains("language_filter") ? st["language_filter"]["languages"] : json();
  return s;
}

Status check_same_settings(const std::vector<std::unique_ptr<Part>>& parts) {
  const json first = settings_of(parts[0]->stats);
  for (size_t i = 1; i < parts.size(); ++i) {
    const json other = settings_of(parts[i]->stats);
    for (const auto& [k, v] : first.items())
      if (other[k] != v)
        return Status::error(fmt::format("{}: {} is {}, {}'s is {}; parts of one shard share the tokenizer and the "
                                         "settings",
                                         parts[i]->prefix, k, other[k].dump(), parts[0]->prefix, v.dump()));
  }
  return Status::ok();
}

// The tasks of one split, back in input order: input file g is task g % N's file g / N.
// `files` gets the tasks' file entries in input order.
Status input_order(const std::vector<std::unique_ptr<Part>>& parts, std::vector<Segment>& out, json& files) {
  const json& t0 = parts[0]->stats.value("task", json::object());
  const uint64_t tasks = t0.value("count", uint64_t{1}), inputs = t0.value("input_files", uint64_t{0});
  std::vector<size_t> by_task(tasks, parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const json& t = parts[i]->stats.value("task", json::object());
    if (!t.contains("files"))
      return Status::error(fmt::format("{}: its stats list no input files (written before tokenize --task); merge "
                                       "it with --concat", parts[i]->prefix));
    const uint64_t k = t.value("index", uint64_t{0});
    if (t.value("count", uint64_t{1}) != tasks || t.value("input_files", uint64_t{0}) != inputs || k >= tasks)
      return Status::error(fmt::format("{}: task {} of {} over {} input files; {} is task {} of {} over {}: not one "
                                       "split (--concat merges any parts in the order given)",
                                       parts[i]->prefix, k, t.value("count", 0), t.value("input_files", 0),
                                       parts[0]->prefix, t0.value("index", 0), tasks, inputs));
    if (by_task[k] != parts.size())
      return Status::error(fmt::format("{} and {} are both task {}", parts[by_task[k]]->prefix, parts[i]->prefix, k));
    by_task[k] = i;
  }
  std::string missing;
  for (uint64_t k = 0; k < tasks; ++k)
    if (by_task[k] == parts.size()) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", k);
  if (!missing.empty())
    return Status::error(fmt::format("the split has {} tasks; task(s) {} are not among the parts", tasks, missing));
  std::vector<uint64_t> next(parts.size(), 0);
  for (uint64_t g = 0; g < inputs; ++g) {
    const size_t i = by_task[g % tasks];
    const json& f = parts[i]->stats["task"]["files"].at(g / tasks);
    if (f.value("input_index", ~uint64_t{0}) != g)
      return Status::error(fmt::format("{}: its stats do not list input file {} where the split puts it",
                                       parts[i]->prefix, g));
    const uint64_t n = f.value("sequences", uint64_t{0});
    if (n) out.push_back({i, next[i], n});
    files.push_back(f);
    next[i] += n;
  }
  for (size_t i = 0; i < parts.size(); ++i)
    if (next[i] != parts[i]->tokens.sequences())
      return Status::error(fmt::format("{}: its files' sequences add up to {}, its .idx holds {}", parts[i]->prefix,
                                       next[i], parts[i]->tokens.sequences()));
  return Status::ok();
}

Status copy_segments(const std::vector<std::unique_ptr<Part>>& parts, const std::vector<Segment>& order,
                     const std::string& output, IndexedWriter& bin, LineageWriter& docs) {
  if (Status s = bin.open(output, parts[0]->tokens.dtype()); !s) return s;
  if (Status s = docs.open(lineage_path(output)); !s) return s;
  for (const Segment& seg : order) {
    const Part& p = *parts[seg.part];
    for (uint64_t i = seg.first; i < seg.first + seg.count; ++i) {
      if (Status s = bin.add_document(p.tokens.sequence(i).to_vector()); !s) return s;
      if (Status s = docs.add(p.ids.id_of(i)); !s) return s;
    }
  }
  return Status::ok();
}

void add_counts(json& into, const json& from) {
  if (!into.is_object()) into = json::object();
  for (const auto& [k, v] : from.items()) {
    if (v.is_number_unsigned()) into[k] = into.value(k, uint64_t{0}) + v.get<uint64_t>();
    else if (v.is_object()) add_counts(into[k], v);
  }
}

// The merged shard's stats, in tokenize's own layout: counts summed, the files in merged order.
// `files`: the input-order file entries (none with --concat).
json merged_stats(const std::vector<std::unique_ptr<Part>>& parts, const json& files, const TokenizeMergeConfig& c,
                  double seconds) {
  json j = parts[0]->stats;
  for (const char* k : {"documents", "sequences", "tokens", "eod_tokens", "text_bytes", "records_skipped", "inputs",
                        "languages", "input_issues", "timing", "task"})
    j.erase(k);
  json counts = json::object(), paths = json::array(), prefixes = json::array();
  for (const auto& p : parts) {
    json own = p->stats;
    for (const char* k : {"tokenizer", "timing", "task", "bytes_per_token", "dtype_code"}) own.erase(k);
    add_counts(counts, own);
    for (const auto& x : p->stats["inputs"].value("paths", json::array()))
      if (std::find(paths.begin(), paths.end(), x) == paths.end()) paths.push_back(x);
    prefixes.push_back(p->prefix);
  }
  for (const char* k : {"documents", "sequences", "tokens", "eod_tokens", "text_bytes", "records_skipped",
                        "input_issues", "languages"})
    if (counts.contains(k)) j[k] = counts[k];
  for (const char* k : {"holdout", "language_filter"})  // their settings stay, their counts are summed
    if (counts.contains(k)) j[k].update(counts[k]);
  if (!j.contains("input_issues")) j["input_issues"] = json::object();
  const uint64_t text = j.value("text_bytes", uint64_t{0}), tok = j.value("tokens", uint64_t{0}) - j.value("eod_tokens", uint64_t{0});
  j["bytes_per_token"] = tok ? (double)text / (double)tok : 0.0;
  for (auto& [k, v] : j["languages"].items())
    v["bytes_per_token"] = v.value("tokens", 0) ? v.value("text_bytes", 0.0) / v.value("tokens", 1.0) : 0.0;
  if (!c.concat) j["task"] = {{"index", 0}, {"count", 1}, {"input_files", files.size()}, {"files", files}};
  j["inputs"] = {{"files", counts["inputs"].value("files", uint64_t{0})},
                 {"bytes_on_disk", counts["inputs"].value("bytes_on_disk", uint64_t{0})}, {"paths", paths}};
  j["outputs"] = {{"bin", indexed_bin_path(c.output)}, {"idx", indexed_idx_path(c.output)},
                  {"docs", lineage_path(c.output)}};
  j["merged_from"] = {{"parts", prefixes}, {"order", c.concat ? "as given" : "input"}};
  j["timing"] = {{"seconds", seconds}};
  return j;
}

Status merge_parts(const TokenizeMergeConfig& c, TokenizeMergeSummary& out) {
  const auto t0 = std::chrono::steady_clock::now();
  if (c.parts.empty()) return Status::error("tokenize merge: no parts");
  std::vector<std::unique_ptr<Part>> parts;
  std::set<std::string> seen;
  for (const std::string& arg : c.parts) {
    const std::string prefix = prefix_of(arg);
    if (!seen.insert(prefix).second) continue;  // a glob names each part's files
    if (fs::weakly_canonical(prefix) == fs::weakly_canonical(c.output))
      return Status::error(fmt::format("{}: the output is one of the parts", c.output));
    parts.push_back(std::make_unique<Part>());
    if (Status s = open_part(prefix, *parts.back()); !s) return s;
  }
  if (Status s = check_same_settings(parts); !s) return s;
  std::vector<Segment> order;
  json files = json::array();
  if (c.concat) {
    for (size_t i = 0; i < parts.size(); ++i) order.push_back({i, 0, parts[i]->tokens.sequences()});
  } else if (Status s = input_order(parts, order, files); !s) {
    return s;
  }
  if (!c.overwrite && (fs::exists(indexed_idx_path(c.output)) || fs::exists(indexed_bin_path(c.output))))
    return Status::error(fmt::format("{}: already exists; use another --output or --overwrite",
                                     indexed_idx_path(c.output)));
  std::error_code ec;
  if (const fs::path dir = fs::path(c.output).parent_path(); !dir.empty()) fs::create_directories(dir, ec);
  fs::remove(indexed_idx_path(c.output), ec);  // the old set never looks complete beside new files
  IndexedWriter bin;
  LineageWriter docs;
  if (Status s = copy_segments(parts, order, c.output, bin, docs); !s) {
    bin.abort();
    docs.abort();
    return s;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const json stats = merged_stats(parts, files, c, seconds);
  if (Status s = docs.finish(); !s) return s;
  if (Status s = files_write_atomic(tokenize_stats_path(c.output), stats.dump(2) + "\n"); !s) return s;
  if (Status s = bin.finish(); !s) return s;
  out.parts = parts.size();
  out.documents = stats.value("documents", uint64_t{0});
  out.tokens = stats.value("tokens", uint64_t{0});
  out.stats_path = tokenize_stats_path(c.output);
  out.text = fmt::format("tokenize merge {}: {} parts ({}), {} documents, {} tokens, {:.1f} s\n  output: {}.bin/.idx/"
                         ".docs, stats: {}\n",
                         c.output, parts.size(), c.concat ? "in the order given" : "in input order", out.documents,
                         out.tokens, seconds, c.output, out.stats_path);
  return Status::ok();
}

}  // namespace

Status tokenize_merge(const TokenizeMergeConfig& c, TokenizeMergeSummary& out) {
  try {
    return merge_parts(c, out);
  } catch (const json::exception& e) {
    // a stats file that parses but lacks a field its stage always writes
    return Status::error(fmt::format("tokenize merge: a part's stats are not tokenize's: {}", e.what()));
  }
}

}  // namespace smelt
