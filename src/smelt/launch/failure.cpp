// An attempt's end read into a cause: smelt train's messages first (they name the rank and host
// best), then Open MPI's mpirun and Slurm's srun notices, then the bare exit status.
#include "smelt/launch/failure.hpp"

#include <signal.h>

#include <regex>

namespace smelt {

namespace {

// The last match of `re` in text (the newest message wins: a tail can hold an earlier attempt's).
bool last_match(const std::string& text, const std::regex& re, std::smatch& out) {
  bool found = false;
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) out = *it, found = true;
  return found;
}

std::string line_of(const std::string& text, size_t pos) {
  const size_t a = text.rfind('\n', pos);
  const size_t b = text.find('\n', pos);
  return text.substr(a == std::string::npos ? 0 : a + 1, (b == std::string::npos ? text.size() : b) - (a == std::string::npos ? 0 : a + 1));
}

// smelt's own: the hang timeout ("rank 1 (host n07) never reached step 3's gradient reduction")
// and the memory ceiling ("memory ceiling: rank 1 (host n07) ...").
bool smelt_message(const std::string& t, Failure& f) {
  static const std::regex hang(R"(rank (\d+) \(host ([^)]*)\) never reached step)");
  static const std::regex memory(R"(memory ceiling: rank (\d+) \(host ([^)]*)\))");
  // the same timeout where no rank could be named (a collective outside a step's reduction)
  static const std::regex unnamed(R"(\[dist\] rank \d+ of \d+: .* waited .* a rank is hung or gone)");
  // a save that met a full disk or a quota ([ckpt] on_error = "stop")
  static const std::regex disk(R"(checkpoint[^\n]*(No space left on device|Disk quota exceeded))");
  std::smatch m;
  if (last_match(t, disk, m)) f.cause = "disk";
  else if (last_match(t, memory, m)) f.cause = "memory";
  else if (last_match(t, hang, m)) f.cause = "hang";
  else if (last_match(t, unnamed, m)) f.cause = "hang";
  else return false;
  if (m.size() > 2) f.rank = std::stoi(m[1].str()), f.host = m[2].str();
  f.detail = line_of(t, (size_t)m.position(0));
  return true;
}

// mpirun (Open MPI 4): a rank ended by a signal, a rank's non-zero exit, a daemon lost or never
// started; srun: a task's exit or signal.
bool launcher_message(const std::string& t, Failure& f) {
  static const std::regex signaled(R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+))");
  static const std::regex exited(R"(Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+))");
  static const std::regex lost(R"(Remote daemon:\s*\S+ on node (\S+))");
  static const std::regex nostart(R"((ORTE was unable to reliably start|ORTE does not know how to route|unable to reach|ssh: connect to host (\S+)|Host key verification failed))");
  static const std::regex aborted(R"(MPI_ABORT was invoked on rank (\d+))");
  static const std::regex srun_task(R"(srun: error: (\S+): task (\d+): (Exited with exit code (\d+)|Killed|Terminated))");
  std::smatch m;
  if (last_match(t, signaled, m)) {
    f.cause = "killed", f.rank = std::stoi(m[1].str()), f.host = m[2].str(), f.signal = std::stoi(m[3].str());
  } else if (last_match(t, lost, m)) {
    f.cause = "launch", f.host = m[1].str();
  } else if (last_match(t, nostart, m)) {
    f.cause = "launch";
    if (m[2].matched) f.host = m[2].str();
  } else if (last_match(t, srun_task, m)) {
    f.host = m[1].str(), f.rank = std::stoi(m[2].str());
    f.cause = m[4].matched ? "exit" : "killed";
    if (!m[4].matched) f.signal = m[3].str() == "Killed" ? SIGKILL : SIGTERM;
  } else if (last_match(t, exited, m)) {
    f.cause = "exit", f.rank = std::stoi(m[1].str());
  } else if (last_match(t, aborted, m)) {
    f.cause = "exit", f.rank = std::stoi(m[1].str());
  } else {
    return false;
  }
  f.detail = line_of(t, (size_t)m.position(0));
  return true;
}

}  // namespace

Failure failure_classify(int exit_code, int term_signal, bool stalled, const std::string& stall_detail,
                         const std::string& tail) {
  Failure f;
  f.exit_code = exit_code;
  const std::string t = tail.size() > (64 << 10) ? tail.substr(tail.size() - (64 << 10)) : tail;
  if (stalled) {
    f.cause = "stall", f.detail = stall_detail;
    return f;
  }
  if (exit_code == 0 && term_signal == 0) return f;
  if (exit_code == 2) {  // smelt's usage exit: the command is wrong, a restart cannot mend it
    f.cause = "usage", f.detail = "exit code 2 (usage): the command or its config is wrong";
    return f;
  }
  if (smelt_message(t, f) || launcher_message(t, f)) return f;
  if (term_signal != 0) {
    f.cause = "killed", f.signal = term_signal;
    f.detail = std::string("the job ended on signal ") + std::to_string(term_signal);
  } else {
    f.cause = "exit";
    f.detail = "exit code " + std::to_string(exit_code);
  }
  return f;
}

}  // namespace smelt
