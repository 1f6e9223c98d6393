// StageBase (restartable_stage.hpp): the stop flag, this task's inputs, the fingerprinted resume
// state and the output's three cases (complete, resume, fresh start).
// Not the pipeline (the RestartableStage template in the header) nor any stage's own files.
#include "smelt/stage/restartable_stage.hpp"

#include <filesystem>

#include "smelt/common/files.hpp"
#include "smelt/common/hash.hpp"

namespace fs = std::filesystem;

namespace smelt {

namespace {
std::atomic<bool> g_stop{false};
}  // namespace

void stage_request_stop() { g_stop = true; }
std::atomic<bool>& stage_stop_flag() { return g_stop; }

std::string stage_issues_line(const std::map<std::string, uint64_t>& issues) {
  if (issues.empty()) return "";
  std::string s = "  input problems:";
  for (const auto& [k, v] : issues) s += fmt::format(" {}={}", k, v);
  return s + "\n";
}

StageBase::StageBase(StageSpec spec) : spec_(std::move(spec)) { g_stop = false; }

Status StageBase::select_inputs(const std::vector<std::string>& inputs, int task, int tasks) {
  std::vector<std::string> all;
  if (Status s = files_expand_inputs(inputs, all); !s) return s;
  input_files_ = all.size();
  for (size_t i = 0; i < all.size(); ++i) {
    if (static_cast<int>(i % static_cast<size_t>(tasks)) != task) continue;
    files_.push_back(all[i]);
    std::error_code ec;
    file_sizes_.push_back(fs::file_size(all[i], ec));
    total_bytes_ += file_sizes_.back();
  }
  if (tasks > 1) suffix_ = fmt::format("-{:05d}", task);
  return Status::ok();
}

void StageBase::set_fingerprint(const std::string& text) { fingerprint_ = fmt::format("{:016x}", hash64(text)); }

uint64_t StageBase::bytes_on_disk() const {
  uint64_t n = 0;
  for (auto s : file_sizes_) n += s;
  return n;
}

Status StageBase::prepare_output(bool& complete) {
  complete = false;
  if (Status s = prepare_folder(); !s) return s;
  const std::string state_path = this->state_path();
  if (fs::exists(state_path)) {
    std::string text;
    if (Status s = files_read_small(state_path, text); !s) return s;
    const json st = json::parse(text, nullptr, false);
    if (st.is_object() && st.value("fingerprint", "") == fingerprint_) {
      if (!st.value("complete", false)) {
        Status s = load_or_damaged(st);
        if (s || !spec_.overwrite) return s;
        spdlog::warn("{}; starting over (--overwrite)", s.message());
      } else if (outputs_present()) {
        complete = true;
        return Status::ok();
      }
    } else if (!spec_.overwrite) {
      return Status::error(other_run_error());
    }
  } else if (!spec_.overwrite) {
    if (Status s = check_no_output(); !s) return s;
  }
  // a fresh start: nothing of an earlier run may mix with this one
  resumed_ = false;
  pos_ = StagePosition{};
  return start_fresh();
}

Status StageBase::load_or_damaged(const json& st) {
  try {
    pos_.file = st.at("position").at("file");
    pos_.rec = st.at("position").at("rec");
    if (Status s = load_state(st); !s) return s;
  } catch (const json::exception& e) {
    return Status::error(
        fmt::format("{}: damaged resume state ({}); rerun with --overwrite", state_path(), e.what()));
  }
  resumed_ = true;
  return Status::ok();
}

Status StageBase::persist_state(bool complete) {
  if (Status s = before_persist(complete); !s) return s;
  json st;
  st["fingerprint"] = fingerprint_;
  st["complete"] = complete;
  add_state(st, complete);
  return files_write_atomic(state_path(), st.dump());
}

}  // namespace smelt
