// The tokenize stage pipeline, on the restartable-stage skeleton (stage/restartable_stage.hpp):
// reader thread -> encoder threads -> ordered writer (this thread).
//
// Order: the reader numbers every document by (file, record) and ships chunks in sequence; encoders
// work on whole chunks; the writer takes chunks back in sequence order and appends one sequence per
// document to PREFIX.bin.partial and its id to PREFIX.docs.partial.
//
// Resume: every checkpoint_bytes of tokens the writer fsyncs both partial files, appends the
// sequence lengths since the last checkpoint to PREFIX.tokenize-lengths (int32 each) and fsyncs it,
// then atomically rewrites PREFIX.tokenize-state.json (input position, byte counts, counters). A
// restarted run with the same fingerprint cuts the three files back to the recorded sizes, rereads
// the inputs up to the recorded position without processing them, and continues.
#include "smelt/dataset/tokenize.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "smelt/common/files.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/common/log.hpp"
#include "smelt/common/ordered_pipeline.hpp"
#include "smelt/common/page_key.hpp"
#include "smelt/common/progress.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/dataset/lineage.hpp"
#include "smelt/stage/restartable_stage.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {

namespace {

constexpr size_t kChunkDocs = 64;
constexpr size_t kChunkBytes = 4u << 20;
constexpr int kStateVersion = 1;
constexpr uint64_t kHoldoutSeed = 0x686f6c646f7574ull;  // "holdout"

bool in_holdout_fraction(const std::string& id, double fraction) {
  return hash_unit(hash64(id, kHoldoutSeed)) < fraction;
}

struct Item : StageItem {
  bool skip = false;                // counted in issues, written nowhere
  bool other_split = false;         // belongs to the other side of the holdout split: not written
  bool other_language = false;      // not one of [languages]: not written
  std::string id, text, meta_json;
  // filled by an encoder
  std::string lang;
  uint64_t text_bytes = 0;
  std::vector<uint32_t> ids;
};

struct LangCount {
  uint64_t documents = 0, tokens = 0, text_bytes = 0;  // tokens without the EOD
};

// Deterministic counters (no timing), restored on resume.
struct Counters {
  uint64_t documents = 0, tokens = 0, eod_tokens = 0, text_bytes = 0, files_done = 0, other_split = 0;
  uint64_t other_language = 0;
  std::map<std::string, uint64_t> issues;
  std::map<std::string, LangCount> langs;
  std::vector<uint64_t> file_sequences;  // sequences written from each of this task's files

  json to_json() const {
    json l = json::object();
    for (const auto& [k, v] : langs) l[k] = {v.documents, v.tokens, v.text_bytes};
    return {{"documents", documents}, {"tokens", tokens}, {"eod_tokens", eod_tokens}, {"text_bytes", text_bytes},
            {"files_done", files_done}, {"other_split", other_split}, {"other_language", other_language},
            {"issues", issues}, {"langs", l}, {"file_sequences", file_sequences}};
  }
  void from_json(const json& j) {
    documents = j.at("documents");
    tokens = j.at("tokens");
    eod_tokens = j.at("eod_tokens");
    text_bytes = j.at("text_bytes");
    files_done = j.at("files_done");
    other_split = j.value("other_split", uint64_t{0});
    other_language = j.value("other_language", uint64_t{0});
    issues = j.at("issues").get<std::map<std::string, uint64_t>>();
    langs.clear();
    for (const auto& [k, v] : j.at("langs").items()) langs[k] = LangCount{v.at(0), v.at(1), v.at(2)};
    file_sequences = j.at("file_sequences").get<std::vector<uint64_t>>();
  }
};

// quality.lang of a refined document (meta_json holds every field but text, id and url).
std::string lang_of(simdjson::dom::parser& parser, const std::string& meta_json) {
  if (meta_json.size() < 2) return "unknown";
  simdjson::dom::element root;
  if (parser.parse(meta_json).get(root) != simdjson::SUCCESS) return "unknown";
  std::string_view lang;
  if (root["quality"]["lang"].get_string().get(lang) != simdjson::SUCCESS || lang.empty()) return "unknown";
  return std::string(lang);
}

double ratio(uint64_t a, uint64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0; }

class TokenizeRun : public RestartableStage<Item, Counters> {
 public:
  TokenizeRun(const TokenizeConfig& c, const TokenEncoder& enc) : RestartableStage(spec_of(c)), c_(c), enc_(enc) {}
  Status run(TokenizeSummary& out);

 private:
  static StageSpec spec_of(const TokenizeConfig& c);
  Status check_encoder() const;
  std::string fingerprint_text() const;
  std::string lengths_path() const { return prefix_ + ".tokenize-lengths"; }
  Status spool_lengths();
  void encode(simdjson::dom::parser& parser, Item& it) const;
  json stats_json(double seconds) const;
  std::string summary_text(double seconds) const;
  // the resume state and the output prefix (StageBase)
  std::string state_path() const override { return tokenize_state_path(prefix_); }
  std::string stats_path() const override { return tokenize_stats_path(prefix_); }
  Status prepare_folder() override;
  bool outputs_present() const override;
  Status load_state(const json& st) override;
  Status check_no_output() override;
  std::string other_run_error() const override;
  Status start_fresh() override;
  Status before_persist(bool complete) override;
  void add_state(json& st, bool complete) const override;
  // the pipeline (RestartableStage)
  ReaderOptions reader_options() const override;
  std::string start_note(int threads) const override;
  std::string done_note() const override { return fmt::format("{} documents", n_.documents); }
  size_t take_doc(RawDoc& doc, Item& it) override;
  std::function<void(Item&)> make_worker() override;
  Status commit_doc(Item& it) override;
  void tick(Progress& p) override;
  // everything committed so far is a contiguous prefix of the input: keep it
  Status save_on_stop() override { return persist_state(false); }
  Status finish(double seconds, std::string& text) override;

  const TokenizeConfig& c_;
  const TokenEncoder& enc_;
  std::string prefix_;  // the output prefix, with "-TTTTT" when tasks > 1
  IndexedDType dtype_ = IndexedDType::kUInt16;

  // writer state (persisted at checkpoints)
  IndexedWriter bin_;
  LineageWriter docs_;
  uint64_t lengths_spooled_ = 0;   // sequence lengths already in the lengths file
  uint64_t checkpoint_at_ = 0;     // .bin bytes at the last checkpoint
};

StageSpec TokenizeRun::spec_of(const TokenizeConfig& c) {
  return StageSpec{.name = "tokenize", .output = c.output, .complete_for = "these inputs and this tokenizer",
                   .threads = c.threads, .log_interval_s = c.log_interval_s, .overwrite = c.overwrite,
                   .chunk_docs = kChunkDocs, .chunk_bytes = kChunkBytes};
}

Status TokenizeRun::check_encoder() const {
  if (!enc_.encode) return Status::error("tokenize: no encoder");
  if (c_.append_eod && !enc_.eod_id)
    return Status::error(fmt::format("{}: the tokenizer has no end-of-document token (<|endoftext|>, </s>, ...); "
                                     "drop --append-eod or use a tokenizer that has one", enc_.path));
  if (c_.output.empty()) return Status::error("tokenize: no output prefix");
  if (c_.tasks < 1 || c_.task < 0 || c_.task >= c_.tasks)
    return Status::error(fmt::format("tokenize: task {} of {}: expected 0 <= task < tasks", c_.task, c_.tasks));
  return Status::ok();
}

// everything that changes the output: not threads, checkpoints or logging
std::string TokenizeRun::fingerprint_text() const {
  std::string fp = fmt::format("tokenize v{}\ntokenizer {:016x} vocab {}\neod {} {}\nfield {}\n", kStateVersion,
                               enc_.content_hash, enc_.vocab_size, c_.append_eod, enc_.eod_id.value_or(0),
                               c_.text_field);
  if (enc_.bos_id) fp += fmt::format("bos {}\n", *enc_.bos_id);
  if (c_.holdout > 0) fp += fmt::format("holdout {} {}\n", c_.holdout, c_.take_holdout);
  if (c_.tasks > 1) fp += fmt::format("task {} of {}, {} input files\n", c_.task, c_.tasks, input_files_);
  if (!c_.languages.empty()) {
    fp += "languages";
    for (const auto& l : c_.languages) fp += " " + l;
    fp += "\n";
  }
  for (size_t i = 0; i < files_.size(); ++i) fp += fmt::format("{}:{}\n", files_[i], file_sizes_[i]);
  return fp;
}

Status TokenizeRun::prepare_folder() {
  fs::path parent = fs::path(prefix_).parent_path();
  std::error_code ec;
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) return Status::error(fmt::format("{}: cannot create the output folder: {}", parent.string(), ec.message()));
  }
  return Status::ok();
}

bool TokenizeRun::outputs_present() const {
  return fs::exists(indexed_idx_path(prefix_)) && fs::exists(lineage_path(prefix_));
}

Status TokenizeRun::check_no_output() {
  const std::string& p = prefix_;
  if (fs::exists(indexed_idx_path(p)) || fs::exists(indexed_bin_path(p)))
    return Status::error(fmt::format("{}: already exists but holds no resume state of this command; use another "
                                     "--output or --overwrite", indexed_idx_path(p)));
  return Status::ok();
}

std::string TokenizeRun::other_run_error() const {
  return fmt::format(
      "{}: holds a tokenize run with other inputs, tokenizer or settings; use another --output or --overwrite",
      prefix_);
}

Status TokenizeRun::start_fresh() {
  // An older complete output is replaced file by file at the end; its .idx goes now, so the old
  // set never looks complete next to a new .docs.
  const std::string& p = prefix_;
  std::error_code ec;
  fs::remove(indexed_idx_path(p), ec);
  n_ = Counters{};
  n_.file_sequences.assign(files_.size(), 0);
  lengths_spooled_ = checkpoint_at_ = 0;
  for (const std::string& f : {tokenize_state_path(p), lengths_path(), bin_.partial_path(), docs_.partial_path()})
    fs::remove(f, ec);
  if (Status s = bin_.open(p, dtype_); !s) return s;
  if (Status s = docs_.open(lineage_path(p)); !s) return s;
  return Status::ok();
}

Status TokenizeRun::load_state(const json& st) {
  const uint64_t bin_bytes = st.at("bin_bytes"), docs_bytes = st.at("docs_bytes"), sequences = st.at("sequences");
  n_.from_json(st.at("counters"));
  if (n_.file_sequences.size() != files_.size())
    return Status::error(fmt::format("{}: counts {} input files, the task has {}; rerun with --overwrite",
                                     tokenize_state_path(prefix_), n_.file_sequences.size(), files_.size()));
  // the lengths of every sequence before the checkpoint
  std::vector<int32_t> lengths(sequences);
  std::FILE* f = std::fopen(lengths_path().c_str(), "rb");
  size_t got = f && sequences ? std::fread(lengths.data(), 4, sequences, f) : 0;
  if (f) std::fclose(f);
  if (got != sequences)
    return Status::error(fmt::format("{}: holds {} sequence lengths, the resume state says {}; rerun with --overwrite",
                                     lengths_path(), got, sequences));
  if (truncate(lengths_path().c_str(), static_cast<off_t>(4 * sequences)) != 0 && sequences > 0)
    return Status::error(fmt::format("{}: cannot cut back to the resume point", lengths_path()));
  std::vector<int64_t> doc_indices(sequences + 1);
  for (uint64_t i = 0; i <= sequences; ++i) doc_indices[i] = static_cast<int64_t>(i);
  if (Status s = bin_.resume(prefix_, dtype_, bin_bytes, std::move(lengths), std::move(doc_indices)); !s)
    return Status::error(s.message() + "; rerun with --overwrite");
  if (Status s = docs_.resume(lineage_path(prefix_), docs_bytes, sequences); !s)
    return Status::error(s.message() + "; rerun with --overwrite");
  lengths_spooled_ = sequences;
  checkpoint_at_ = bin_bytes;
  return Status::ok();
}

// the sequence lengths since the last checkpoint, appended to the lengths file and synced
Status TokenizeRun::spool_lengths() {
  const auto& lengths = bin_.lengths();
  if (lengths.size() <= lengths_spooled_) return Status::ok();
  std::FILE* f = std::fopen(lengths_path().c_str(), "ab");
  if (!f) return Status::error(fmt::format("{}: cannot append", lengths_path()));
  const size_t n = lengths.size() - lengths_spooled_;
  bool ok = std::fwrite(lengths.data() + lengths_spooled_, 4, n, f) == n;
  ok = std::fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return Status::error(fmt::format("{}: write failed", lengths_path()));
  lengths_spooled_ = lengths.size();
  return Status::ok();
}

// a checkpoint: the partial files synced and the lengths spooled before the state names them
Status TokenizeRun::before_persist(bool complete) {
  if (complete) return Status::ok();  // the complete state is a bare marker
  if (Status s = bin_.sync(); !s) return s;
  if (Status s = docs_.sync(); !s) return s;
  if (Status s = spool_lengths(); !s) return s;
  checkpoint_at_ = bin_.bin_bytes();
  return Status::ok();
}

void TokenizeRun::add_state(json& st, bool complete) const {
  st["version"] = kStateVersion;
  if (complete) return;
  st["position"] = position_json();
  st["bin_bytes"] = bin_.bin_bytes();
  st["docs_bytes"] = docs_.bytes();
  st["sequences"] = bin_.lengths().size();
  st["counters"] = n_.to_json();
}

ReaderOptions TokenizeRun::reader_options() const {
  ReaderOptions ropt;
  ropt.text_field = c_.text_field;
  return ropt;
}

std::string TokenizeRun::start_note(int threads) const {
  return fmt::format("{} encoder thread(s), {} tokens (vocab {})", threads, indexed_dtype_name(dtype_),
                     enc_.vocab_size);
}

size_t TokenizeRun::take_doc(RawDoc& doc, Item& it) {
  if (doc.is_html) {
    // tokenize takes refined text; raw HTML belongs to `smelt prep` first
    it.issues.push_back("html_input");
    it.skip = true;
    if (logged_issues_++ < kStageMaxLoggedIssues)
      spdlog::warn("{}: HTML is not refined text (run smelt prep first); the document was skipped", doc.source);
    return 0;
  }
  const size_t bytes = doc.text.size();
  // The split's key: the page (page_key) when the document has a URL, so a page is on the
  // same side in every crawl of it and two records of one page never straddle the split.
  const bool held_side = c_.holdout > 0 && in_holdout_fraction(page_key(doc.url, doc.id), c_.holdout);
  it.id = std::move(doc.id);
  if (c_.holdout > 0 && held_side != c_.take_holdout) {
    it.other_split = true;
  } else {
    it.text = std::move(doc.text);
    it.meta_json = std::move(doc.meta_json);
  }
  return bytes;
}

std::function<void(Item&)> TokenizeRun::make_worker() {
  // each encoder thread keeps its own JSON parser (for the language in a document's meta)
  auto parser = std::make_shared<simdjson::dom::parser>();
  return [this, parser](Item& it) { encode(*parser, it); };
}

void TokenizeRun::encode(simdjson::dom::parser& parser, Item& it) const {
  if (it.end_of_file || it.skip || it.other_split) return;  // (other_language is found here)
  it.lang = lang_of(parser, it.meta_json);
  it.meta_json.clear();
  if (!c_.languages.empty() && std::find(c_.languages.begin(), c_.languages.end(), it.lang) == c_.languages.end()) {
    it.other_language = true;
    std::string().swap(it.text);
    return;
  }
  it.text_bytes = it.text.size();
  if (enc_.bos_id) it.ids.push_back(*enc_.bos_id);
  enc_.encode(it.text, it.ids);
  if (c_.append_eod) it.ids.push_back(*enc_.eod_id);
  std::string().swap(it.text);
}

Status TokenizeRun::commit_doc(Item& it) {
  if (it.skip) return Status::ok();
  if (it.other_split) { n_.other_split++; return Status::ok(); }
  if (it.other_language) { n_.other_language++; return Status::ok(); }
  if (Status s = bin_.add_document(it.ids); !s) return s;
  if (Status s = docs_.add(it.id); !s) return s;
  const uint64_t eod = c_.append_eod ? 1 : 0;
  n_.file_sequences.at(it.file)++;
  n_.documents++;
  n_.tokens += it.ids.size();
  n_.eod_tokens += eod;
  n_.text_bytes += it.text_bytes;
  LangCount& l = n_.langs[it.lang];
  l.documents++;
  l.tokens += it.ids.size() - eod;
  l.text_bytes += it.text_bytes;
  if (bin_.bin_bytes() - checkpoint_at_ >= c_.checkpoint_bytes) return persist_state(false);
  return Status::ok();
}

void TokenizeRun::tick(Progress& p) {
  p.tick(n_.documents, bytes_progress_, fmt::format("{:.1f}M tokens", n_.tokens / 1e6));
}

json TokenizeRun::stats_json(double seconds) const {
  json j;
  j["stage"] = "tokenize";
  j["complete"] = true;
  j["inputs"] = {{"files", files_.size()}, {"bytes_on_disk", bytes_on_disk()}, {"paths", c_.inputs}};
  j["outputs"] = {{"bin", indexed_bin_path(prefix_)}, {"idx", indexed_idx_path(prefix_)},
                  {"docs", lineage_path(prefix_)}};
  j["tokenizer"] = {{"path", enc_.path}, {"content_hash", fmt::format("{:016x}", enc_.content_hash)},
                    {"vocab_size", enc_.vocab_size}};
  j["tokenizer"]["eod_id"] = enc_.eod_id ? json(*enc_.eod_id) : json(nullptr);
  j["tokenizer"]["bos_id"] = enc_.bos_id ? json(*enc_.bos_id) : json(nullptr);
  j["dtype"] = indexed_dtype_name(dtype_);
  j["dtype_code"] = static_cast<int>(dtype_);
  j["append_eod"] = c_.append_eod;
  j["text_field"] = c_.text_field;
  j["documents"] = n_.documents;
  j["sequences"] = n_.documents;
  if (c_.holdout > 0)
    j["holdout"] = {{"fraction", c_.holdout}, {"side", c_.take_holdout ? "holdout" : "rest"},
                    {"documents_in_other_side", n_.other_split}};
  if (!c_.languages.empty())
    j["language_filter"] = {{"languages", c_.languages}, {"documents_in_other_languages", n_.other_language}};
  // where each file's sequences are: `smelt tokenize merge` puts the tasks' outputs back in input order
  json files = json::array();
  for (size_t i = 0; i < files_.size(); ++i)
    files.push_back({{"path", files_[i]}, {"input_index", i * c_.tasks + c_.task},
                     {"sequences", n_.file_sequences[i]}});
  j["task"] = {{"index", c_.task}, {"count", c_.tasks}, {"input_files", input_files_}, {"files", files}};
  j["tokens"] = n_.tokens;
  j["eod_tokens"] = n_.eod_tokens;
  j["text_bytes"] = n_.text_bytes;
  j["bytes_per_token"] = ratio(n_.text_bytes, n_.tokens - n_.eod_tokens);
  json langs = json::object();
  for (const auto& [k, v] : n_.langs)
    langs[k] = {{"documents", v.documents}, {"tokens", v.tokens}, {"text_bytes", v.text_bytes},
                {"bytes_per_token", ratio(v.text_bytes, v.tokens)}};
  j["languages"] = langs;
  j["input_issues"] = n_.issues;
  uint64_t skipped = 0;
  for (const auto& [k, v] : n_.issues)
    if (k != "invalid_utf8") skipped += v;  // invalid UTF-8 is repaired, the document kept
  j["records_skipped"] = skipped;
  double s = std::max(seconds, 1e-9);
  // timing is the one part that differs between identical runs
  j["timing"] = {{"seconds", seconds}, {"documents_per_s", n_.documents / s}, {"tokens_per_s", n_.tokens / s},
                 {"text_mb_per_s", n_.text_bytes / 1e6 / s}, {"threads", threads_}, {"resumed", resumed_}};
  return j;
}

std::string TokenizeRun::summary_text(double seconds) const {
  std::string s = fmt::format(
      "tokenize {}: {} documents, {} tokens ({}), {:.2f} bytes/token, {:.1f} MB text, {:.1f} s ({:.0f} tokens/s)\n",
      prefix_, n_.documents, n_.tokens, indexed_dtype_name(dtype_), ratio(n_.text_bytes, n_.tokens - n_.eod_tokens),
      n_.text_bytes / 1e6, seconds, n_.tokens / std::max(seconds, 1e-9));
  if (!c_.languages.empty()) {
    std::string kept;
    for (const auto& l : c_.languages) kept += (kept.empty() ? "" : ", ") + l;
    s += fmt::format("  languages: {} only; {} documents in other languages left out\n", kept, n_.other_language);
  }
  if (!n_.langs.empty()) {
    s += "  bytes/token by language:";
    for (const auto& [k, v] : n_.langs)
      s += fmt::format(" {}={:.2f} ({} docs)", k, ratio(v.text_bytes, v.tokens), v.documents);
    s += "\n";
  }
  return s + stage_issues_line(n_.issues);
}

Status TokenizeRun::finish(double seconds, std::string& text) {
  // completeness last: .docs, stats, then .bin and finally .idx
  if (Status s = docs_.finish(); !s) return s;
  if (Status s = files_write_atomic(stats_path(), stats_json(seconds).dump(2) + "\n"); !s) return s;
  if (Status s = bin_.finish(); !s) return s;
  // a rerun of the same command now says "already complete"
  if (Status s = persist_state(true); !s) return s;
  std::error_code ec;
  fs::remove(lengths_path(), ec);
  text = summary_text(seconds) + fmt::format("  output: {}.bin/.idx/.docs, stats: {}\n", prefix_, stats_path());
  return Status::ok();
}

Status TokenizeRun::run(TokenizeSummary& out) {
  if (Status s = check_encoder(); !s) return s;
  dtype_ = indexed_dtype_for_vocab(enc_.vocab_size);
  if (Status s = select_inputs(c_.inputs, c_.task, c_.tasks); !s) return s;
  prefix_ = c_.output + suffix_;
  set_fingerprint(fingerprint_text());
  if (Status s = run_stage(out); !s || out.already_complete) return s;
  out.documents = n_.documents;
  out.tokens = n_.tokens;
  return Status::ok();
}

}  // namespace

std::string tokenize_stats_path(const std::string& prefix) { return prefix + ".stats.json"; }
std::string tokenize_state_path(const std::string& prefix) { return prefix + ".tokenize-state.json"; }

Status tokenize_run(const TokenizeConfig& c, const TokenEncoder& enc, TokenizeSummary& out) {
  TokenizeRun run(c, enc);
  return run.run(out);
}

}  // namespace smelt
