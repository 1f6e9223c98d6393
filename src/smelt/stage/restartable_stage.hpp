// The skeleton every restartable data stage shares (prep, tokenize; global dedup next): this task's
// share of the inputs, a fingerprinted resume state, reader thread -> worker threads -> ordered
// commit, one stop flag, stop at a clean point and resume. docs/architecture.md "Restartable stages".
// Not here: what a stage does to a document, what it writes or counts (the stage's hooks).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/common/log.hpp"
#include "smelt/common/ordered_pipeline.hpp"
#include "smelt/common/progress.hpp"
#include "smelt/common/status.hpp"
#include "smelt/stage/stage.hpp"
#include "smelt/text/doc_reader.hpp"

namespace smelt {

// Input problems, one " reason=count" each, as the summaries print them ("" when there are none).
std::string stage_issues_line(const std::map<std::string, uint64_t>& issues);

// Position of the next item to commit: everything before (file, rec) is done.
struct StagePosition {
  uint64_t file = 0, rec = 0;
};

// What every pipeline item carries; a stage's Item derives from it.
struct StageItem {
  uint32_t file = 0;
  uint64_t rec = 0;                 // record index in the file; for end_of_file, the file's record count
  bool end_of_file = false;
  std::vector<std::string> issues;  // reader issue reasons that came before this item
};

// The fixed facts of one stage run.
struct StageSpec {
  std::string name;           // "prep": progress lines and messages
  std::string output;         // the output folder or prefix, as messages name it
  std::string complete_for;   // "these inputs and settings": the already-complete message
  const char* issues_counted_in = "the stats";  // where problems not logged are counted
  int threads = 0;            // worker threads; 0 = all cores
  double log_interval_s = 10;
  bool overwrite = false;     // replace a different earlier run's output
  size_t chunk_docs = 64, chunk_bytes = 8u << 20;
};

inline constexpr size_t kStageMaxLoggedIssues = 50;

// The parts that do not depend on the item type: inputs, resume state, output folder.
class StageBase {
 public:
  // clears the stop flag: a stop requested before this run does not end it
  explicit StageBase(StageSpec spec);
  virtual ~StageBase() = default;

 protected:
  using json = nlohmann::json;
  // files i of the expanded inputs with i % tasks == task, their sizes; suffix_ "-TTTTT" when tasks > 1;
  // input_files_ the count of every task's
  Status select_inputs(const std::vector<std::string>& inputs, int task, int tasks);
  // fingerprint_ from everything that changes the output (the stage's text)
  void set_fingerprint(const std::string& text);
  // An earlier run's state decides: complete (nothing to do), resumed_ (load_state took it), or a
  // fresh start (start_fresh); a different run is refused without --overwrite.
  Status prepare_output(bool& complete);
  // before_persist, then {fingerprint, complete} + add_state written atomically to state_path()
  Status persist_state(bool complete);
  json position_json() const { return {{"file", pos_.file}, {"rec", pos_.rec}}; }
  uint64_t bytes_on_disk() const;

  // ---- hooks of the resume state and the output
  virtual std::string state_path() const = 0;
  virtual std::string stats_path() const = 0;
  virtual Status prepare_folder() = 0;                 // create the output folder, drop temporaries
  virtual bool outputs_present() const { return true; }  // the state says complete: is the output there?
  virtual Status load_state(const json& st) = 0;       // the stage's part; json errors are caught here
  virtual Status check_no_output() = 0;                // no state, no --overwrite: refuse a foreign output
  virtual std::string other_run_error() const = 0;     // the state is of other inputs or settings
  virtual Status start_fresh() = 0;                    // remove an earlier run's files, reset counters
  virtual Status before_persist(bool complete) { (void)complete; return Status::ok(); }
  virtual void add_state(json& st, bool complete) const = 0;

  const StageSpec spec_;
  std::vector<std::string> files_;  // this task's inputs, in order
  std::vector<uint64_t> file_sizes_;
  uint64_t total_bytes_ = 0;
  std::string suffix_;              // "" or "-TTTTT" when tasks > 1
  uint64_t input_files_ = 0;        // files of the expanded inputs, every task's
  std::string fingerprint_;
  StagePosition pos_;
  bool resumed_ = false;
  int threads_ = 1;
  std::atomic<uint64_t> bytes_progress_{0};
  std::atomic<size_t> logged_issues_{0};

 private:
  Status load_or_damaged(const json& st);
};

// The pipeline over the stage's Item; Counters must hold `issues` (reason -> count) and `files_done`.
template <class Item, class Counters>
class RestartableStage : public StageBase {
 public:
  using StageBase::StageBase;

 protected:
  // After select_inputs and set_fingerprint: resolve the output, run the pipeline to the end of the
  // inputs or a stop, then finish. Fills out's StageSummary part.
  Status run_stage(StageSummary& out);

  // ---- hooks of the pipeline
  virtual ReaderOptions reader_options() const = 0;
  virtual Status start_writing() { return Status::ok(); }  // after the output is resolved
  virtual std::string start_note(int threads) const = 0;   // the start line after "N MB, "
  virtual std::string done_note() const = 0;               // "3 part(s)": resume and stop messages
  virtual size_t take_doc(RawDoc& doc, Item& it) = 0;       // reader thread; bytes toward the chunk
  virtual std::function<void(Item&)> make_worker() = 0;    // once per worker thread
  virtual Status commit_doc(Item& it) = 0;                 // in input order; pos_ already past it
  virtual void tick(Progress& p) = 0;
  virtual Status save_on_stop() { return Status::ok(); }
  virtual Status finish(double seconds, std::string& text) = 0;  // outputs, stats, final state

  Counters n_;
  std::unique_ptr<OrderedPipeline<Item>> pipe_;

 private:
  void reader_main();
  Status commit(Item& it);
};

template <class Item, class Counters>
Status RestartableStage<Item, Counters>::run_stage(StageSummary& out) {
  bool complete = false;
  if (Status s = prepare_output(complete); !s) return s;
  out.stats_path = stats_path();
  if (complete) {
    out.already_complete = true;
    out.text = fmt::format("{} {}: already complete for {}; see {}\n", spec_.name, spec_.output, spec_.complete_for,
                           out.stats_path);
    return Status::ok();
  }
  if (resumed_)
    spdlog::info("resuming {}: {} done, continuing at input {} record {}", spec_.output, done_note(), pos_.file,
                 pos_.rec);
  if (Status s = start_writing(); !s) return s;
  threads_ = spec_.threads > 0 ? spec_.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pipe_ = std::make_unique<OrderedPipeline<Item>>(threads_, spec_.chunk_docs, spec_.chunk_bytes, stage_stop_flag());
  spdlog::info("{} input file(s), {:.1f} MB, {}", files_.size(), total_bytes_ / 1e6, start_note(threads_));

  Progress progress(spec_.name, total_bytes_, spec_.log_interval_s);
  Status status = pipe_->run([this] { reader_main(); }, [this] { return make_worker(); },
                             [this](Item& it) { return commit(it); }, [&] { tick(progress); });
  progress.finish();
  const double seconds = progress.elapsed_s();
  if (!status) return status;
  if (stage_stop_flag()) {
    if (Status s = save_on_stop(); !s) return s;
    return Status::error(
        fmt::format("interrupted after {}; rerun the same command to resume from there", done_note()));
  }
  if (Status s = finish(seconds, out.text); !s) return s;
  out.resumed = resumed_;
  return Status::ok();
}

template <class Item, class Counters>
void RestartableStage<Item, Counters>::reader_main() {
  ReadFromPosition r;
  r.files = &files_;
  r.sizes = &file_sizes_;
  r.from_file = static_cast<uint32_t>(pos_.file);
  r.from_rec = pos_.rec;
  r.options = reader_options();
  r.bytes_progress = &bytes_progress_;
  r.logged = &logged_issues_;
  r.max_logged = kStageMaxLoggedIssues;
  r.counted_in = spec_.issues_counted_in;
  r.stopped = [] { return stage_stop_flag().load(); };
  r.doc = [&](uint32_t f, uint64_t rec, RawDoc& doc, std::vector<std::string>& issues) {
    Item it;
    it.file = f;
    it.rec = rec;
    it.issues = std::move(issues);
    const size_t bytes = take_doc(doc, it);
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

template <class Item, class Counters>
Status RestartableStage<Item, Counters>::commit(Item& it) {
  for (const auto& r : it.issues) n_.issues[r]++;
  if (it.end_of_file) {
    n_.files_done++;
    pos_ = StagePosition{it.file + 1ull, 0};
    return Status::ok();
  }
  pos_ = StagePosition{it.file, it.rec + 1};
  return commit_doc(it);
}

}  // namespace smelt
