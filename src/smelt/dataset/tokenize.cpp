// The tokenize stage pipeline: reader thread -> encoder threads -> ordered writer (this thread).
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
#include "smelt/text/doc_reader.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {

namespace {

std::atomic<bool> g_stop{false};

constexpr size_t kChunkDocs = 64;
constexpr size_t kChunkBytes = 4u << 20;
constexpr size_t kMaxLoggedIssues = 50;
constexpr int kStateVersion = 1;
constexpr uint64_t kHoldoutSeed = 0x686f6c646f7574ull;  // "holdout"

bool in_holdout_fraction(const std::string& id, double fraction) {
  return hash_unit(hash64(id, kHoldoutSeed)) < fraction;
}

struct Item {
  uint32_t file = 0;
  uint64_t rec = 0;
  bool end_of_file = false;
  bool skip = false;                // counted in issues, written nowhere
  bool other_split = false;         // belongs to the other side of the holdout split: not written
  bool other_language = false;      // not one of [languages]: not written
  std::vector<std::string> issues;  // reader issue reasons that came before this item
  std::string id, text, meta_json;
  // filled by an encoder
  std::string lang;
  uint64_t text_bytes = 0;
  std::vector<uint32_t> ids;
};

struct Position {
  uint64_t file = 0, rec = 0;
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

  json to_json() const {
    json l = json::object();
    for (const auto& [k, v] : langs) l[k] = {v.documents, v.tokens, v.text_bytes};
    return {{"documents", documents}, {"tokens", tokens}, {"eod_tokens", eod_tokens}, {"text_bytes", text_bytes},
            {"files_done", files_done}, {"other_split", other_split}, {"other_language", other_language},
            {"issues", issues}, {"langs", l}};
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

class TokenizeRun {
 public:
  TokenizeRun(const TokenizeConfig& c, const TokenEncoder& enc) : c_(c), enc_(enc) {}
  Status run(TokenizeSummary& out);

 private:
  Status prepare_output(bool& complete);
  Status load_state(const json& st);
  Status checkpoint(bool complete);
  void reader_main();
  Status commit_item(Item& it);
  json stats_json(double seconds) const;
  std::string summary_text(double seconds) const;
  std::string lengths_path() const { return c_.output + ".tokenize-lengths"; }

  const TokenizeConfig& c_;
  const TokenEncoder& enc_;
  IndexedDType dtype_ = IndexedDType::kUInt16;
  std::vector<std::string> files_;
  std::vector<uint64_t> file_sizes_;
  uint64_t total_bytes_ = 0;
  int threads_ = 1;
  std::string fingerprint_;

  // writer state (persisted at checkpoints)
  Position pos_;
  Counters n_;
  IndexedWriter bin_;
  LineageWriter docs_;
  uint64_t lengths_spooled_ = 0;   // sequence lengths already in the lengths file
  uint64_t checkpoint_at_ = 0;     // .bin bytes at the last checkpoint
  bool resumed_ = false;

  // pipeline
  std::unique_ptr<OrderedPipeline<Item>> pipe_;
  std::atomic<uint64_t> bytes_progress_{0};
  std::atomic<size_t> logged_issues_{0};
};

Status TokenizeRun::prepare_output(bool& complete) {
  complete = false;
  const std::string& p = c_.output;
  fs::path parent = fs::path(p).parent_path();
  std::error_code ec;
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) return Status::error(fmt::format("{}: cannot create the output folder: {}", parent.string(), ec.message()));
  }
  const std::string state_path = tokenize_state_path(p);
  if (fs::exists(state_path)) {
    std::string text;
    if (Status s = files_read_small(state_path, text); !s) return s;
    json st = json::parse(text, nullptr, false);
    if (!st.is_discarded() && st.value("fingerprint", "") == fingerprint_) {
      if (st.value("complete", false) && fs::exists(indexed_idx_path(p)) && fs::exists(lineage_path(p))) {
        complete = true;
        return Status::ok();
      }
      if (!st.value("complete", false)) {
        Status s = load_state(st);
        if (s) return s;
        if (!c_.overwrite) return s;
        spdlog::warn("{}; starting over (--overwrite)", s.message());
      }
    } else if (!c_.overwrite) {
      return Status::error(fmt::format(
          "{}: holds a tokenize run with other inputs, tokenizer or settings; use another --output or --overwrite",
          p));
    }
  } else if (!c_.overwrite && (fs::exists(indexed_idx_path(p)) || fs::exists(indexed_bin_path(p)))) {
    return Status::error(fmt::format("{}: already exists but holds no resume state of this command; use another "
                                     "--output or --overwrite", indexed_idx_path(p)));
  }
  // a fresh start: nothing of an earlier run may mix with this one. An older complete output is
  // replaced file by file at the end; its .idx goes now, so the old set never looks complete
  // next to a new .docs.
  fs::remove(indexed_idx_path(p), ec);
  resumed_ = false;
  pos_ = Position{};
  n_ = Counters{};
  lengths_spooled_ = checkpoint_at_ = 0;
  for (const std::string& f : {tokenize_state_path(p), lengths_path(), bin_.partial_path(), docs_.partial_path()})
    fs::remove(f, ec);
  if (Status s = bin_.open(p, dtype_); !s) return s;
  if (Status s = docs_.open(lineage_path(p)); !s) return s;
  return Status::ok();
}

Status TokenizeRun::load_state(const json& st) {
  const std::string state_path = tokenize_state_path(c_.output);
  uint64_t bin_bytes = 0, docs_bytes = 0, sequences = 0;
  try {
    pos_.file = st.at("position").at("file");
    pos_.rec = st.at("position").at("rec");
    bin_bytes = st.at("bin_bytes");
    docs_bytes = st.at("docs_bytes");
    sequences = st.at("sequences");
    n_.from_json(st.at("counters"));
  } catch (const json::exception& e) {
    return Status::error(fmt::format("{}: damaged resume state ({}); rerun with --overwrite", state_path, e.what()));
  }
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
  if (Status s = bin_.resume(c_.output, dtype_, bin_bytes, std::move(lengths), std::move(doc_indices)); !s)
    return Status::error(s.message() + "; rerun with --overwrite");
  if (Status s = docs_.resume(lineage_path(c_.output), docs_bytes, sequences); !s)
    return Status::error(s.message() + "; rerun with --overwrite");
  lengths_spooled_ = sequences;
  checkpoint_at_ = bin_bytes;
  resumed_ = true;
  return Status::ok();
}

Status TokenizeRun::checkpoint(bool complete) {
  if (Status s = bin_.sync(); !s) return s;
  if (Status s = docs_.sync(); !s) return s;
  const auto& lengths = bin_.lengths();
  if (lengths.size() > lengths_spooled_) {
    std::FILE* f = std::fopen(lengths_path().c_str(), "ab");
    if (!f) return Status::error(fmt::format("{}: cannot append", lengths_path()));
    const size_t n = lengths.size() - lengths_spooled_;
    bool ok = std::fwrite(lengths.data() + lengths_spooled_, 4, n, f) == n;
    ok = std::fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
    ok = std::fclose(f) == 0 && ok;
    if (!ok) return Status::error(fmt::format("{}: write failed", lengths_path()));
    lengths_spooled_ = lengths.size();
  }
  json st;
  st["version"] = kStateVersion;
  st["fingerprint"] = fingerprint_;
  st["complete"] = complete;
  st["position"] = {{"file", pos_.file}, {"rec", pos_.rec}};
  st["bin_bytes"] = bin_.bin_bytes();
  st["docs_bytes"] = docs_.bytes();
  st["sequences"] = lengths.size();
  st["counters"] = n_.to_json();
  checkpoint_at_ = bin_.bin_bytes();
  return files_write_atomic(tokenize_state_path(c_.output), st.dump());
}

void TokenizeRun::reader_main() {
  ReaderOptions ropt;
  ropt.text_field = c_.text_field;
  ReadFromPosition r;
  r.files = &files_;
  r.sizes = &file_sizes_;
  r.from_file = (uint32_t)pos_.file;
  r.from_rec = pos_.rec;
  r.options = ropt;
  r.bytes_progress = &bytes_progress_;
  r.logged = &logged_issues_;
  r.max_logged = kMaxLoggedIssues;
  r.stopped = [] { return (bool)g_stop; };
  r.doc = [&](uint32_t f, uint64_t rec, RawDoc& doc, std::vector<std::string>& issues) {
    Item it;
    it.file = f;
    it.rec = rec;
    it.issues = std::move(issues);
    size_t bytes = 0;
    if (doc.is_html) {
      // tokenize takes refined text; raw HTML belongs to `smelt prep` first
      it.issues.push_back("html_input");
      it.skip = true;
      if (logged_issues_++ < kMaxLoggedIssues)
        spdlog::warn("{}: HTML is not refined text (run smelt prep first); the document was skipped", doc.source);
    } else {
      bytes = doc.text.size();
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
    }
    return pipe_->add(std::move(it), bytes);
  };
  r.file_end = [&](uint32_t f, uint64_t rec, std::vector<std::string>& issues) {
    Item end;
    end.file = f;
    end.rec = rec;
    end.end_of_file = true;
    end.issues = std::move(issues);
    return pipe_->add(std::move(end), 0);
  };
  read_from_position(r);
}

Status TokenizeRun::commit_item(Item& it) {
  for (const auto& r : it.issues) n_.issues[r]++;
  if (it.end_of_file) {
    n_.files_done++;
    pos_ = Position{it.file + 1ull, 0};
    return Status::ok();
  }
  pos_ = Position{it.file, it.rec + 1};
  if (it.skip) return Status::ok();
  if (it.other_split) { n_.other_split++; return Status::ok(); }
  if (it.other_language) { n_.other_language++; return Status::ok(); }
  if (Status s = bin_.add_document(it.ids); !s) return s;
  if (Status s = docs_.add(it.id); !s) return s;
  const uint64_t eod = c_.append_eod ? 1 : 0;
  n_.documents++;
  n_.tokens += it.ids.size();
  n_.eod_tokens += eod;
  n_.text_bytes += it.text_bytes;
  LangCount& l = n_.langs[it.lang];
  l.documents++;
  l.tokens += it.ids.size() - eod;
  l.text_bytes += it.text_bytes;
  if (bin_.bin_bytes() - checkpoint_at_ >= c_.checkpoint_bytes) return checkpoint(false);
  return Status::ok();
}

json TokenizeRun::stats_json(double seconds) const {
  json j;
  j["stage"] = "tokenize";
  j["complete"] = true;
  uint64_t disk = 0;
  for (auto s : file_sizes_) disk += s;
  j["inputs"] = {{"files", files_.size()}, {"bytes_on_disk", disk}, {"paths", c_.inputs}};
  j["outputs"] = {{"bin", indexed_bin_path(c_.output)}, {"idx", indexed_idx_path(c_.output)},
                  {"docs", lineage_path(c_.output)}};
  j["tokenizer"] = {{"path", enc_.path}, {"content_hash", fmt::format("{:016x}", enc_.content_hash)},
                    {"vocab_size", enc_.vocab_size}};
  j["tokenizer"]["eod_id"] = enc_.eod_id ? json(*enc_.eod_id) : json(nullptr);
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
      c_.output, n_.documents, n_.tokens, indexed_dtype_name(dtype_), ratio(n_.text_bytes, n_.tokens - n_.eod_tokens),
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
  if (!n_.issues.empty()) {
    s += "  input problems:";
    for (const auto& [k, v] : n_.issues) s += fmt::format(" {}={}", k, v);
    s += "\n";
  }
  return s;
}

Status TokenizeRun::run(TokenizeSummary& out) {
  if (!enc_.encode) return Status::error("tokenize: no encoder");
  if (c_.append_eod && !enc_.eod_id)
    return Status::error(fmt::format("{}: the tokenizer has no end-of-document token (<|endoftext|>, </s>, ...); "
                                     "drop --append-eod or use a tokenizer that has one", enc_.path));
  if (c_.output.empty()) return Status::error("tokenize: no output prefix");
  dtype_ = indexed_dtype_for_vocab(enc_.vocab_size);
  if (Status s = files_expand_inputs(c_.inputs, files_); !s) return s;
  for (const auto& f : files_) {
    std::error_code ec;
    file_sizes_.push_back(fs::file_size(f, ec));
    total_bytes_ += file_sizes_.back();
  }
  // everything that changes the output: not threads, checkpoints or logging
  std::string fp = fmt::format("tokenize v{}\ntokenizer {:016x} vocab {}\neod {} {}\nfield {}\n", kStateVersion,
                               enc_.content_hash, enc_.vocab_size, c_.append_eod, enc_.eod_id.value_or(0),
                               c_.text_field);
  if (c_.holdout > 0) fp += fmt::format("holdout {} {}\n", c_.holdout, c_.take_holdout);
  if (!c_.languages.empty()) {
    fp += "languages";
    for (const auto& l : c_.languages) fp += " " + l;
    fp += "\n";
  }
  for (size_t i = 0; i < files_.size(); ++i) fp += fmt::format("{}:{}\n", files_[i], file_sizes_[i]);
  fingerprint_ = fmt::format("{:016x}", hash64(fp));

  bool complete = false;
  if (Status s = prepare_output(complete); !s) return s;
  out.stats_path = tokenize_stats_path(c_.output);
  if (complete) {
    out.already_complete = true;
    out.text = fmt::format("tokenize {}: already complete for these inputs and this tokenizer; see {}\n", c_.output,
                           out.stats_path);
    return Status::ok();
  }
  if (resumed_)
    spdlog::info("resuming {}: {} documents done, continuing at input {} record {}", c_.output, n_.documents,
                 pos_.file, pos_.rec);

  int threads = c_.threads > 0 ? c_.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads_ = threads;
  pipe_ = std::make_unique<OrderedPipeline<Item>>(threads, kChunkDocs, kChunkBytes, g_stop);
  spdlog::info("{} input file(s), {:.1f} MB, {} encoder thread(s), {} tokens (vocab {})", files_.size(),
               total_bytes_ / 1e6, threads, indexed_dtype_name(dtype_), enc_.vocab_size);

  Progress progress("tokenize", total_bytes_, c_.log_interval_s);
  Status status = pipe_->run(
      [this] { reader_main(); },
      [this] {
        // each encoder thread keeps its own JSON parser (for the language in a document's meta)
        return [this, parser = simdjson::dom::parser()](Item& it) mutable {
          if (it.end_of_file || it.skip || it.other_split) return;  // (other_language is found here)
          it.lang = lang_of(parser, it.meta_json);
          it.meta_json.clear();
          if (!c_.languages.empty() &&
              std::find(c_.languages.begin(), c_.languages.end(), it.lang) == c_.languages.end()) {
            it.other_language = true;
            std::string().swap(it.text);
            return;
          }
          it.text_bytes = it.text.size();
          enc_.encode(it.text, it.ids);
          if (c_.append_eod) it.ids.push_back(*enc_.eod_id);
          std::string().swap(it.text);
        };
      },
      [this](Item& it) { return commit_item(it); },
      [&] { progress.tick(n_.documents, bytes_progress_, fmt::format("{:.1f}M tokens", n_.tokens / 1e6)); });
  progress.finish();
  double seconds = progress.elapsed_s();

  if (!status) return status;
  if (g_stop) {
    // everything committed so far is a contiguous prefix of the input: keep it
    if (Status s = checkpoint(false); !s) return s;
    return Status::error(fmt::format("interrupted after {} documents; rerun the same command to resume from there",
                                     n_.documents));
  }

  // completeness last: .docs, stats, then .bin and finally .idx
  if (Status s = docs_.finish(); !s) return s;
  if (Status s = files_write_atomic(out.stats_path, stats_json(seconds).dump(2) + "\n"); !s) return s;
  if (Status s = bin_.finish(); !s) return s;
  // a rerun of the same command now says "already complete"
  json st = {{"version", kStateVersion}, {"fingerprint", fingerprint_}, {"complete", true}};
  if (Status s = files_write_atomic(tokenize_state_path(c_.output), st.dump()); !s) return s;
  std::error_code ec;
  fs::remove(lengths_path(), ec);
  out.documents = n_.documents;
  out.tokens = n_.tokens;
  out.resumed = resumed_;
  out.text = summary_text(seconds) + fmt::format("  output: {}.bin/.idx/.docs, stats: {}\n", c_.output, out.stats_path);
  return Status::ok();
}

}  // namespace

std::string tokenize_stats_path(const std::string& prefix) { return prefix + ".stats.json"; }
std::string tokenize_state_path(const std::string& prefix) { return prefix + ".tokenize-state.json"; }

void tokenize_request_stop() { g_stop = true; }

Status tokenize_run(const TokenizeConfig& c, const TokenEncoder& enc, TokenizeSummary& out) {
  g_stop = false;
  TokenizeRun run(c, enc);
  return run.run(out);
}

}  // namespace smelt
