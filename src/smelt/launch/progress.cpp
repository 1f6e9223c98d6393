// Following a run's metrics.jsonl from outside the trainer: appended lines, or the whole file after
// a resume rewrote it (a new inode, or a shorter file).
#include "smelt/launch/progress.hpp"

#include <sys/stat.h>

#include <fstream>

#include <nlohmann/json.hpp>

namespace smelt {

void RunProgress::begin_attempt(int attempt, int64_t resume_step, double now) {
  attempt_ = attempt, resume_step_ = resume_step, last_step_ = -1, last_time_ = now;
  // Steps after the resume point are done again by this attempt: what the failed one ran of them
  // is lost work, not kept.
  for (auto it = seen_.upper_bound(resume_step); it != seen_.end();) it = seen_.erase(it);
}

double RunProgress::seen_at(int64_t step) const {
  auto it = seen_.find(step);
  return it == seen_.end() ? -1 : it->second.at;
}

void RunProgress::take_line(const std::string& line, double now, bool& fresh) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.contains("event") || !j.contains("step")) return;
  const int64_t step = j["step"].get<int64_t>();
  if (step <= resume_step_ || seen_.count(step)) return;  // an earlier attempt's line, or read again
  const bool first = last_step_ < 0;
  const double spent = first ? j.value("step_ms", 0.0) / 1e3 : now - last_time_;
  seen_[step] = Seen{attempt_, now, spent};
  last_step_ = step, last_time_ = now;
  fresh = true;
}

bool RunProgress::read(double now) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return false;
  if ((uint64_t)st.st_ino != ino_ || (uint64_t)st.st_size < offset_) offset_ = 0, ino_ = (uint64_t)st.st_ino;
  if ((uint64_t)st.st_size == offset_) return false;
  std::ifstream in(path_, std::ios::binary);
  in.seekg((std::streamoff)offset_);
  std::string line;
  bool fresh = false;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a line still being written: read it whole next time
    offset_ += line.size() + 1;
    if (!line.empty()) take_line(line, now, fresh);
  }
  return fresh;
}

double RunProgress::kept_seconds() const {
  std::ifstream in(path_);
  std::string line;
  double sum = 0;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.contains("event") || !j.contains("step")) continue;
    auto it = seen_.find(j["step"].get<int64_t>());
    if (it != seen_.end()) sum += it->second.spent;
  }
  return sum;
}

}  // namespace smelt
