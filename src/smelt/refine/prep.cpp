// The prep stage pipeline, on the restartable-stage skeleton (stage/restartable_stage.hpp): reader
// thread -> worker threads -> committer (this thread).
//
// Order and determinism: the reader numbers every document by (file, record) and ships them in
// chunks; workers extract, measure, filter and sample each document independently (decisions depend
// only on the document and the seed); the committer takes chunks back in sequence order, consults
// the dedup index and writes parts. Output is therefore byte-identical for any thread count.
//
// Resume: after each finished part the committer appends the kept documents' dedup signatures to
// DIR/.prep-dedup.bin and atomically rewrites DIR/.prep-state.json (input position, counters, parts,
// rejected examples). A restarted run reloads both, skips the inputs already consumed and goes on
// writing the next part: the final output equals that of an uninterrupted run.
#include "smelt/refine/prep.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/common/config.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/common/json_write.hpp"
#include "smelt/common/log.hpp"
#include "smelt/common/ordered_pipeline.hpp"
#include "smelt/common/page_key.hpp"
#include "smelt/common/progress.hpp"
#include "smelt/refine/prep_doc.hpp"
#include "smelt/refine/prep_labels.hpp"
#include "smelt/refine/shard_writer.hpp"
#include "smelt/stage/restartable_stage.hpp"
#include "smelt/text/charset.hpp"
#include "smelt/text/terminal_codes.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {

namespace {

constexpr int kScoreBins = 20;
constexpr size_t kChunkDocs = 64;
constexpr size_t kChunkBytes = 8u << 20;

// Counters that make up stats.json; deterministic (no timing), restored on resume.
struct Counters {
  uint64_t docs_read = 0, docs_kept = 0, bytes_in = 0, text_bytes = 0, bytes_out = 0;
  uint64_t files_done = 0;
  uint64_t terminal_docs = 0, terminal_codes = 0, terminal_bytes = 0;  // documents with control codes stripped
  std::map<std::string, uint64_t> drops, issues;
  std::map<std::string, std::pair<uint64_t, uint64_t>> langs;  // lang -> (in, out)
  std::vector<uint64_t> hist_all = std::vector<uint64_t>(kScoreBins), hist_kept = std::vector<uint64_t>(kScoreBins);
  PiiCounts pii;                                 // masked in the documents kept
  std::map<std::string, uint64_t> url_blocks;    // "LIST/CATEGORY" -> documents
  std::map<std::string, uint64_t> contaminated;  // decontamination file -> documents
  ScoreHistograms scores;                        // the score pass's histograms
  LabelTally labels;                             // the drop decision per labelled kind ([prep] labels)

  json to_json() const {
    json j;
    j["docs_read"] = docs_read; j["docs_kept"] = docs_kept; j["bytes_in"] = bytes_in;
    j["text_bytes"] = text_bytes; j["bytes_out"] = bytes_out; j["files_done"] = files_done;
    j["drops"] = drops; j["issues"] = issues;
    j["terminal_codes"] = terminal_json();
    j["langs"] = langs_json();
    j["hist_all"] = hist_all; j["hist_kept"] = hist_kept;
    j["pii"] = pii_json();
    j["url_blocks"] = url_blocks; j["contaminated"] = contaminated;
    j["scores"] = scores.to_json();
    if (!labels.empty()) j["labels"] = labels.to_json();
    return j;
  }
  json pii_json() const {
    return {{"emails", pii.emails}, {"ipv4", pii.ipv4}, {"ipv6", pii.ipv6}, {"phones", pii.phones}};
  }
  json terminal_json() const {
    return {{"documents", terminal_docs}, {"codes", terminal_codes}, {"bytes", terminal_bytes}};
  }
  json langs_json() const {
    json l = json::object();
    for (const auto& [k, v] : langs) l[k] = {{"in", v.first}, {"out", v.second}};
    return l;
  }
  void from_json(const json& j) {
    docs_read = j.at("docs_read"); docs_kept = j.at("docs_kept"); bytes_in = j.at("bytes_in");
    text_bytes = j.at("text_bytes"); bytes_out = j.at("bytes_out"); files_done = j.at("files_done");
    drops = j.at("drops").get<std::map<std::string, uint64_t>>();
    issues = j.at("issues").get<std::map<std::string, uint64_t>>();
    const json t = j.value("terminal_codes", json::object());  // absent in a state written before them
    terminal_docs = t.value("documents", 0ull), terminal_codes = t.value("codes", 0ull);
    terminal_bytes = t.value("bytes", 0ull);
    langs.clear();
    for (const auto& [k, v] : j.at("langs").items()) langs[k] = {v.at("in"), v.at("out")};
    hist_all = j.at("hist_all").get<std::vector<uint64_t>>();
    hist_kept = j.at("hist_kept").get<std::vector<uint64_t>>();
    const json p = j.value("pii", json::object());
    pii.emails = p.value("emails", 0ull), pii.ipv4 = p.value("ipv4", 0ull);
    pii.ipv6 = p.value("ipv6", 0ull), pii.phones = p.value("phones", 0ull);
    url_blocks = j.value("url_blocks", json::object()).get<std::map<std::string, uint64_t>>();
    contaminated = j.value("contaminated", json::object()).get<std::map<std::string, uint64_t>>();
    scores = ScoreHistograms{};
    if (j.contains("scores")) (void)scores.from_json(j["scores"], "resume state");
    labels = LabelTally{};
    if (j.contains("labels")) labels.from_json(j["labels"]);
  }
};

json parts_json(const std::vector<ShardInfo>& parts) {
  json a = json::array();
  for (const auto& p : parts)
    a.push_back({{"file", p.file}, {"docs", p.docs}, {"bytes", p.bytes}, {"compressed", p.compressed}});
  return a;
}

int score_bin(double s) { return std::clamp(static_cast<int>(s * kScoreBins), 0, kScoreBins - 1); }

class PrepRun : public RestartableStage<PrepItem, Counters> {
 public:
  PrepRun(const PrepConfig& c, ReferenceScorer* ref) : RestartableStage(spec_of(c)), c_(c), ref_(ref) {}
  Status run(PrepSummary& out);

 private:
  static StageSpec spec_of(const PrepConfig& c);
  std::string path(const std::string& name) const { return (fs::path(c_.output) / name).string(); }
  std::string fingerprint_text() const;
  Status reload_dedup_index();
  Status write_rejected() const;
  json stats_json(double seconds, bool complete) const;
  std::string summary_text(double seconds) const;
  // the resume state and the output folder (StageBase)
  std::string state_path() const override { return path(".prep-state" + suffix_ + ".json"); }
  std::string stats_path() const override { return path("stats" + suffix_ + ".json"); }
  Status prepare_folder() override;
  Status load_state(const json& st) override;
  Status check_no_output() override;
  std::string other_run_error() const override;
  Status start_fresh() override;
  Status before_persist(bool complete) override;
  void add_state(json& st, bool complete) const override;
  // the pipeline (RestartableStage)
  ReaderOptions reader_options() const override { return c_.read; }
  Status start_writing() override;
  std::string start_note(int threads) const override;
  std::string done_note() const override { return fmt::format("{} part(s)", parts_.size()); }
  size_t take_doc(RawDoc& doc, PrepItem& it) override;
  std::function<void(PrepItem&)> make_worker() override;
  Status commit_doc(PrepItem& it) override;
  void tick(Progress& p) override { p.tick(n_.docs_read, bytes_progress_); }
  Status finish(double seconds, std::string& text) override;

  void count_refinery(const PrepItem& it);
  json timing_json(double seconds) const;
  std::string stage_time_line() const;
  Status write_scores(double seconds) const;

  const PrepConfig& c_;
  ReferenceScorer* ref_;
  Refinery refinery_;
  PrepLabels labels_;  // [prep] labels, when set
  std::array<std::atomic<uint64_t>, kPrepStages> stage_ns_{};  // worker time per stage (not persisted)
  // committer state (persisted)
  std::vector<ShardInfo> parts_;
  std::map<std::string, std::vector<std::string>> rejected_;
  uint64_t dedup_log_bytes_ = 0;
  std::string pending_sigs_;             // signatures of kept docs since the last finished part
  std::unique_ptr<DedupIndex> index_;
  std::unique_ptr<ShardWriter> writer_;
};

// True for a file this task's runs write: its parts, state, dedup log and stats.
bool is_task_file(const std::string& name, const std::string& suffix) {
  std::string part = "part" + suffix + "-";
  bool is_part = name.rfind(part, 0) == 0 && name.size() == part.size() + 5 + 10 &&
                 name.compare(name.size() - 10, 10, ".jsonl.zst") == 0;
  return is_part || name == ".prep-state" + suffix + ".json" || name == ".prep-dedup" + suffix + ".bin" ||
         name == "stats" + suffix + ".json" || name == "scores" + suffix + ".json";
}

StageSpec PrepRun::spec_of(const PrepConfig& c) {
  return StageSpec{.name = "prep", .output = c.output, .complete_for = "these inputs and settings",
                   .issues_counted_in = "stats.json",
                   .threads = c.threads, .log_interval_s = c.log_interval_s, .overwrite = c.overwrite,
                   .chunk_docs = kChunkDocs, .chunk_bytes = kChunkBytes};
}

// the fingerprint covers everything that changes the output (not threads or logging)
std::string PrepRun::fingerprint_text() const {
  PrepConfig fp = c_;
  fp.threads = 0;
  fp.log_interval_s = 0;
  fp.overwrite = false;
  std::string text = config_to_string(prep_config_to_toml(fp));
  for (size_t i = 0; i < files_.size(); ++i) text += "\n" + files_[i] + fmt::format(":{}", file_sizes_[i]);
  if (!labels_.empty()) text += fmt::format("\nlabels {:016x}", labels_.digest());
  return text + "\n" + refinery_.fingerprint();
}

Status PrepRun::prepare_folder() {
  std::error_code ec;
  fs::create_directories(c_.output, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create output folder: {}", c_.output, ec.message()));
  // leftovers of a killed run: temporaries are never valid output
  for (const auto& e : fs::directory_iterator(c_.output, ec)) {
    std::string name = e.path().filename().string();
    if (name.find(".tmp-") != std::string::npos) fs::remove(e.path(), ec);
  }
  return Status::ok();
}

Status PrepRun::check_no_output() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(c_.output, ec)) {
    std::string name = e.path().filename().string();
    if (is_task_file(name, suffix_) && name.rfind("part", 0) == 0)
      return Status::error(fmt::format(
          "{}: already holds output parts ({}) but no resume state; use another --output folder or --overwrite",
          c_.output, name));
  }
  return Status::ok();
}

std::string PrepRun::other_run_error() const {
  return fmt::format("{}: holds a prep run with other inputs or settings; use another --output folder or --overwrite",
                     c_.output);
}

Status PrepRun::start_fresh() {
  // remove what an earlier run of this task left
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(c_.output, ec)) {
    std::string name = e.path().filename().string();
    if (is_task_file(name, suffix_)) fs::remove(e.path(), ec);
  }
  fs::remove_all(path("rejected" + suffix_), ec);
  n_ = Counters{};
  parts_.clear();
  rejected_.clear();
  dedup_log_bytes_ = 0;
  pending_sigs_.clear();
  index_ = std::make_unique<DedupIndex>(c_.dedup);
  // a state exists before the first part does, so a run killed right after renaming a part
  // into place is still recognised as this run and resumed, not refused as a foreign folder
  return persist_state(false);
}

Status PrepRun::load_state(const json& st) {
  n_.from_json(st.at("counters"));
  for (const auto& p : st.at("parts"))
    parts_.push_back(ShardInfo{p.at("file"), p.at("docs"), p.at("bytes"), p.at("compressed")});
  rejected_ = st.at("rejected").get<std::map<std::string, std::vector<std::string>>>();
  dedup_log_bytes_ = st.at("dedup_log_bytes");
  // every part the state names must be on disk, whole
  for (const auto& p : parts_) {
    std::error_code ec;
    uint64_t size = fs::file_size(path(p.file), ec);
    if (ec || size != p.compressed)
      return Status::error(fmt::format("{}: part {} is missing or has the wrong size; rerun with --overwrite",
                                       c_.output, p.file));
  }
  return reload_dedup_index();
}

// the dedup index from the signature log, cut to what the state covers
Status PrepRun::reload_dedup_index() {
  index_ = std::make_unique<DedupIndex>(c_.dedup);
  std::string log_path = path(".prep-dedup" + suffix_ + ".bin");
  std::string log;
  if (dedup_log_bytes_ > 0) {
    if (Status s = files_read_small(log_path, log); !s) return s;
    if (log.size() < dedup_log_bytes_)
      return Status::error(fmt::format("{}: shorter than the resume state says; rerun with --overwrite", log_path));
    log.resize(dedup_log_bytes_);
    size_t pos = 0;
    DedupSignature sig;
    while (pos < log.size()) {
      if (!dedup_signature_read(log, pos, sig))
        return Status::error(fmt::format("{}: damaged at byte {}; rerun with --overwrite", log_path, pos));
      index_->check_and_insert(sig);
    }
  }
  if (truncate(log_path.c_str(), static_cast<off_t>(dedup_log_bytes_)) != 0 && dedup_log_bytes_ > 0)
    return Status::error(fmt::format("{}: cannot truncate to the resume point", log_path));
  return Status::ok();
}

// the signatures of the kept documents since the last state go to the dedup log first
Status PrepRun::before_persist(bool) {
  if (pending_sigs_.empty()) return Status::ok();
  std::string log_path = path(".prep-dedup" + suffix_ + ".bin");
  std::FILE* f = std::fopen(log_path.c_str(), "ab");
  if (!f) return Status::error(fmt::format("{}: cannot append", log_path));
  bool ok = std::fwrite(pending_sigs_.data(), 1, pending_sigs_.size(), f) == pending_sigs_.size();
  ok = std::fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return Status::error(fmt::format("{}: write failed", log_path));
  dedup_log_bytes_ += pending_sigs_.size();
  pending_sigs_.clear();
  return Status::ok();
}

void PrepRun::add_state(json& st, bool) const {
  st["position"] = position_json();
  st["counters"] = n_.to_json();
  st["parts"] = parts_json(parts_);
  st["rejected"] = rejected_;
  st["dedup_log_bytes"] = dedup_log_bytes_;
}

Status PrepRun::start_writing() {
  writer_ = std::make_unique<ShardWriter>(c_.output, "part" + suffix_ + "-", c_.shard_mb << 20, c_.zstd_level,
                                          parts_.size());
  return Status::ok();
}

std::string PrepRun::start_note(int threads) const {
  return fmt::format("{} worker thread(s){}{}\n{}", threads,
                     c_.tasks > 1 ? fmt::format(", task {} of {}", c_.task, c_.tasks) : "",
                     c_.only_score ? ", a score pass (no output parts)" : "", refinery_.describe());
}

size_t PrepRun::take_doc(RawDoc& doc, PrepItem& it) {
  const size_t bytes = doc.text.size();
  it.doc = std::move(doc);
  return bytes;
}

std::function<void(PrepItem&)> PrepRun::make_worker() {
  return [this](PrepItem& it) {
    if (it.end_of_file) return;
    process_item(c_, refinery_, it);
    for (int k = 0; k < kPrepStages; ++k) stage_ns_[k].fetch_add(it.stage_ns[k], std::memory_order_relaxed);
  };
}

Status PrepRun::commit_doc(PrepItem& it) {
  n_.docs_read++;
  n_.bytes_in += it.raw_bytes;
  n_.text_bytes += it.text_bytes;
  if (it.stripped.sequences > 0)
    n_.terminal_docs++, n_.terminal_codes += it.stripped.sequences, n_.terminal_bytes += it.stripped.bytes;
  if (!it.lang.empty()) n_.langs[it.lang].first++;
  if (it.score >= 0) n_.hist_all[score_bin(it.score)]++;
  count_refinery(it);
  if (c_.only_score) return Status::ok();
  if (it.drop.empty() && c_.dedup.enabled && !c_.only_extract) {
    switch (index_->check_and_insert(it.sig)) {
      case DedupIndex::Verdict::kExact: it.drop = "exact_duplicate"; break;
      case DedupIndex::Verdict::kNear: it.drop = "near_duplicate"; break;
      case DedupIndex::Verdict::kUnique: dedup_signature_write(it.sig, pending_sigs_); break;
    }
  }
  if (!labels_.empty()) n_.labels.add(labels_, labels_.find(it.doc.url, it.doc.id), it.drop);
  if (!it.drop.empty()) {
    n_.drops[it.drop]++;
    auto& ex = rejected_[it.drop];
    if (ex.size() < c_.keep_rejected) {
      std::string line = std::move(it.line);
      line += ",\"rejected\":{\"reason\":";
      json_append_string(line, it.drop);
      if (!it.rules.empty()) {
        line += ",\"failed_rules\":";
        json_append_string(line, it.rules);
      }
      line += "}}";
      ex.push_back(std::move(line));
    }
    return Status::ok();
  }
  n_.docs_kept++;
  n_.bytes_out += it.text_bytes;
  n_.pii.emails += it.pii.emails, n_.pii.ipv4 += it.pii.ipv4, n_.pii.ipv6 += it.pii.ipv6, n_.pii.phones += it.pii.phones;
  if (!it.lang.empty()) n_.langs[it.lang].second++;
  if (it.score >= 0) n_.hist_kept[score_bin(it.score)]++;
  it.line.push_back('}');
  if (Status s = writer_->append(it.line); !s) return s;
  ShardInfo closed;
  if (writer_->take_closed(closed)) {
    parts_.push_back(closed);
    if (Status s = persist_state(false); !s) return s;
  }
  return Status::ok();
}

// What the refinery decided about one document, in the counters (and the score pass's histograms).
void PrepRun::count_refinery(const PrepItem& it) {
  if (!it.url_block.empty()) n_.url_blocks[it.url_block]++;
  if (it.contaminated >= 0 && refinery_.decontam) n_.contaminated[refinery_.decontam->files()[it.contaminated]]++;
  if (!c_.only_score || !it.scored) return;
  if (c_.score_sample < 1 && hash_unit(hash64(page_key(it.doc.url, it.doc.id), c_.seed ^ 0x5c0e5a3bULL)) >= c_.score_sample)
    return;
  for (size_t i = 0; i < it.class_probs.size() && i < refinery_.classifiers.size(); ++i)
    n_.scores.add_classifier(refinery_.classifiers[i].c.name, it.class_probs[i]);
  if (it.ref_bpb >= 0) n_.scores.add_bpb(it.lang, it.ref_bpb);
}

json PrepRun::timing_json(double seconds) const {
  double s = std::max(seconds, 1e-9);
  json stages = json::object();
  for (int k = 0; k < kPrepStages; ++k) stages[prep_stage_name(k)] = stage_ns_[k].load() / 1e9;
  return {{"seconds", seconds}, {"docs_per_s", n_.docs_read / s}, {"mb_in_per_s", n_.bytes_in / 1e6 / s},
          {"resumed", resumed_}, {"worker_seconds_by_stage", stages}};
}

// "worker time by stage: extract 41%, language 6%, ..." (stages that took any time).
std::string PrepRun::stage_time_line() const {
  uint64_t total = 0;
  for (int k = 0; k < kPrepStages; ++k) total += stage_ns_[k].load();
  if (total == 0) return "";
  std::string s = "  worker time by stage:";
  for (int k = 0; k < kPrepStages; ++k) {
    const uint64_t ns = stage_ns_[k].load();
    if (ns * 1000 >= total) s += fmt::format(" {} {:.1f}%", prep_stage_name(k), 100.0 * ns / total);
  }
  return s + "\n";
}

// The score pass's histograms, the file a real pass's [prep] scores reads.
Status PrepRun::write_scores(double seconds) const {
  json j = {{"stage", "prep --only score"}, {"complete", true}, {"task", c_.task}, {"tasks", c_.tasks},
            {"score_sample", c_.score_sample}, {"documents_read", n_.docs_read}, {"seconds", seconds},
            {"histograms", n_.scores.to_json()}};
  return files_write_atomic(path("scores" + suffix_ + ".json"), j.dump() + "\n");
}

json PrepRun::stats_json(double seconds, bool complete) const {
  json j;
  j["stage"] = "prep";
  j["complete"] = complete;
  j["task"] = c_.task;
  j["tasks"] = c_.tasks;
  j["inputs"] = {{"files", files_.size()}, {"bytes_on_disk", bytes_on_disk()}};
  uint64_t dropped = n_.docs_read - n_.docs_kept;
  j["documents"] = {{"read", n_.docs_read}, {"kept", n_.docs_kept}, {"dropped", dropped}};
  uint64_t compressed = 0;
  for (const auto& p : parts_) compressed += p.compressed;
  j["bytes"] = {{"in", n_.bytes_in}, {"text_extracted", n_.text_bytes}, {"text_out", n_.bytes_out},
                {"out_compressed", compressed}};
  j["drops"] = n_.drops;
  j["input_issues"] = n_.issues;
  j["terminal_codes"] = n_.terminal_json();  // documents whose control codes were stripped, codes, bytes
  j["languages"] = n_.langs_json();
  j["score_histogram"] = {{"bins", kScoreBins}, {"range", {0.0, 1.0}}, {"all", n_.hist_all}, {"kept", n_.hist_kept}};
  j["parts"] = parts_json(parts_);
  if (index_) j["dedup_index"] = {{"docs", index_->size()}, {"bytes", index_->memory_bytes()}};
  j["pii_masked"] = n_.pii_json();
  j["url_blocked"] = n_.url_blocks;
  j["contaminated"] = n_.contaminated;
  if (!labels_.empty()) j["labels"] = n_.labels.to_json(), j["labels"]["file"] = c_.labels;
  // timing is the one part of stats.json that differs between identical runs
  j["timing"] = timing_json(seconds);
  toml::table cfg = prep_config_to_toml(c_);
  std::stringstream ss;
  ss << toml::json_formatter{cfg};
  j["config"] = json::parse(ss.str());
  j["config"]["inputs"] = c_.inputs;
  return j;
}

std::string PrepRun::summary_text(double seconds) const {
  std::string s = fmt::format("prep {}: {} of {} documents kept ({:.1f}%), {:.1f} MB in -> {:.1f} MB text out, {} part(s), {:.1f} s\n",
                              c_.output, n_.docs_kept, n_.docs_read,
                              n_.docs_read ? 100.0 * n_.docs_kept / n_.docs_read : 0.0, n_.bytes_in / 1e6,
                              n_.bytes_out / 1e6, parts_.size(), seconds);
  if (!n_.drops.empty()) {
    s += "  dropped:";
    for (const auto& [k, v] : n_.drops) s += fmt::format(" {}={}", k, v);
    s += "\n";
  }
  s += stage_issues_line(n_.issues);
  if (n_.terminal_docs > 0)
    s += fmt::format("  terminal control codes stripped: {} in {} documents ({} bytes)\n", n_.terminal_codes,
                     n_.terminal_docs, n_.terminal_bytes);
  if (!n_.langs.empty()) {
    s += "  languages (in/out):";
    for (const auto& [k, v] : n_.langs) s += fmt::format(" {}={}/{}", k, v.first, v.second);
    s += "\n";
  }
  if (n_.pii.total() > 0)
    s += fmt::format("  personal data masked: {} e-mail, {} IPv4, {} IPv6, {} phone\n", n_.pii.emails, n_.pii.ipv4,
                     n_.pii.ipv6, n_.pii.phones);
  if (!n_.url_blocks.empty()) {
    s += "  URLs blocked (list/category):";
    for (const auto& [k, v] : n_.url_blocks) s += fmt::format(" {}={}", k, v);
    s += "\n";
  }
  if (!n_.contaminated.empty()) {
    s += "  contaminated (evaluation file):";
    for (const auto& [k, v] : n_.contaminated) s += fmt::format(" {}={}", k, v);
    s += "\n";
  }
  if (!labels_.empty()) s += n_.labels.summary_text(c_.labels);
  return s + stage_time_line();
}

// rejected examples, one file per reason
Status PrepRun::write_rejected() const {
  if (c_.keep_rejected == 0 || rejected_.empty()) return Status::ok();
  std::string dir = path("rejected" + suffix_);
  std::error_code ec;
  fs::create_directories(dir, ec);
  for (const auto& [reason, lines] : rejected_) {
    std::string text;
    for (const auto& l : lines) text += l + "\n";
    if (Status s = files_write_atomic((fs::path(dir) / (reason + ".jsonl")).string(), text); !s) return s;
  }
  return Status::ok();
}

Status PrepRun::finish(double seconds, std::string& text) {
  ShardInfo last;
  if (Status s = writer_->close(&last); !s) return s;
  if (last.docs > 0) parts_.push_back(last);
  if (Status s = write_rejected(); !s) return s;
  if (c_.only_score)
    if (Status s = write_scores(seconds); !s) return s;
  if (Status s = files_write_atomic(stats_path(), stats_json(seconds, true).dump(2) + "\n"); !s) return s;
  if (Status s = persist_state(true); !s) return s;
  text = summary_text(seconds) +
         (c_.only_score ? fmt::format("  score histograms: {}/scores{}.json (a real pass reads them: [prep] scores = "
                                      "\"{}\"), stats: {}\n",
                                      c_.output, suffix_, c_.output, stats_path())
                        : fmt::format("  output: {}/part{}-*.jsonl.zst, stats: {}\n", c_.output, suffix_, stats_path()));
  return Status::ok();
}

Status PrepRun::run(PrepSummary& out) {
  if (Status s = select_inputs(c_.inputs, c_.task, c_.tasks); !s) return s;
  // every model and list loads before any output: a bad file fails here, naming it
  if (!c_.only_extract)
    if (Status s = Refinery::load(c_, ref_, refinery_); !s) return s;
  if (!c_.labels.empty())
    if (Status s = labels_.load(c_.labels); !s) return s;
  set_fingerprint(fingerprint_text());
  if (Status s = run_stage(out); !s || out.already_complete) return s;
  out.docs_read = n_.docs_read;
  out.docs_kept = n_.docs_kept;
  out.parts = parts_.size();
  return Status::ok();
}

}  // namespace

Status prep_run(const PrepConfig& c, PrepSummary& out, ReferenceScorer* ref) {
  PrepRun run(c, ref);
  return run.run(out);
}

}  // namespace smelt
