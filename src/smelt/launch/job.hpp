// One attempt of a supervised job: a child process in its own process group whose standard error
// the supervisor reads (echoed, logged, the last part kept for the failure's cause), and a stop
// that reaches every process it started on this machine. Not the restart policy (launch/supervisor.cpp).
#pragma once
#include <sys/types.h>

#include <cstdio>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"

namespace smelt {

// s in single quotes for sh.
std::string shell_quote(const std::string& s);
// Runs `shell_cmd` through sh; its standard output in `out`. Returns pclose's status (-1: not run).
int run_capture(const std::string& shell_cmd, std::string& out);

// Makes this process the reaper of its descendants' orphans (PR_SET_CHILD_SUBREAPER), so a rank
// whose launcher died is still found (and reaped) by Job::stop.
void job_adopt_orphans();

class Job {
 public:
  Job() = default;
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Starts argv[0] (looked up on PATH) with argv, stdout inherited, stderr piped to this side.
  // `log` (may be null): every byte of the job's stderr is appended there too; `echo`: and to this
  // process's stderr.
  Status start(const std::vector<std::string>& argv, std::FILE* log, bool echo = true);
  // Reads what stderr has for up to `wait_ms` (echoed as start said); returns true
  // while the job runs, false once it has ended (then exit_code()/term_signal() say how).
  bool poll(int wait_ms);
  // SIGCONT (a stopped rank must see the rest) and SIGTERM to the group (mpirun passes it on), then
  // SIGKILL after `grace_s`; SIGCONT and SIGKILL also to every descendant of this process (mpirun
  // puts each rank and each daemon it starts in a group of its own; with job_adopt_orphans() those
  // whose parent died are ours too); waits for them and drains stderr. Safe after the job ended.
  void stop(double grace_s);
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !ended_; }
  int exit_code() const { return exit_code_; }      // -1 when ended by a signal
  int term_signal() const { return term_signal_; }  // 0 when it exited
  // The last bytes of stderr (up to 256 KiB), for the failure's cause.
  const std::string& tail() const { return tail_; }

 private:
  void read_available();
  void reap(int status);

  pid_t pid_ = -1;
  int err_fd_ = -1;
  bool ended_ = false, echo_ = true;
  int exit_code_ = -1, term_signal_ = 0;
  std::string tail_;
  std::FILE* log_ = nullptr;
};

}  // namespace smelt
