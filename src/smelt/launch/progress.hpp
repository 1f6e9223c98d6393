// What a supervised run has done, read from its metrics.jsonl as it grows: the steps each attempt
// reached and when, for the stall check, the steps a failure lost, and goodput (the time spent on
// steps that were kept over the wall time). Not the trainer's own metrics (train/step_report.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace smelt {

class RunProgress {
 public:
  explicit RunProgress(std::string metrics_path) : path_(std::move(metrics_path)) {}

  // An attempt begins that resumes after `resume_step` (0 for a fresh start): lines of steps up to
  // it are the earlier attempts' (the trainer keeps them when it resumes) and are not new work.
  void begin_attempt(int attempt, int64_t resume_step, double now);
  // Reads what was appended (or the whole file when the trainer rewrote it); records each new
  // step line with `now`. Returns true when a new step line came.
  bool read(double now);

  int64_t last_step() const { return last_step_; }          // this attempt's newest step (-1: none yet)
  double last_step_time() const { return last_time_; }      // when it was seen (the attempt's start before)
  // When `step` was first seen (any attempt; the latest one that ran it), or -1.
  double seen_at(int64_t step) const;
  // The time spent on the steps in the file now, each counted from the attempt that kept it: the
  // time since the same attempt's previous line, or the line's own step_ms for an attempt's first.
  double kept_seconds() const;

 private:
  struct Seen {
    int attempt;
    double at, spent;
  };
  void take_line(const std::string& line, double now, bool& fresh);

  std::string path_;
  uint64_t offset_ = 0, ino_ = 0;
  int attempt_ = 0;
  int64_t resume_step_ = 0, last_step_ = -1;
  double last_time_ = 0;
  std::map<int64_t, Seen> seen_;  // [step]
};

}  // namespace smelt
