// Why an attempt of a supervised training job ended: its exit, whether the supervisor stopped it,
// and what the job printed last (smelt train's own messages and mpirun's notices) read into a
// cause, the rank and the host. Not the restart decision (launch/supervisor.cpp).
#pragma once
#include <string>

namespace smelt {

struct Failure {
  // "killed" (a rank ended by a signal), "exit" (a rank or the launcher exited non-zero),
  // "hang" (the job's own hang timeout named a rank), "stall" (no new metrics line in time: the
  // supervisor stopped it), "memory" (a rank passed its memory ceiling), "disk" (a checkpoint's
  // save met a full disk or a quota), "launch" (a host could not be reached to start a rank),
  // "usage" (exit code 2: the command itself is wrong; no restart mends that), or "" (exit 0).
  std::string cause;
  int rank = -1;         // -1: not known
  std::string host;      // "" when not known
  int exit_code = -1;    // of the job's leader; -1 when it ended by a signal
  int signal = 0;        // the signal named (a rank's, else the leader's)
  std::string detail;    // the line the cause was read from, or what the supervisor saw
};

// exit_code/term_signal: how the job's leader ended; stalled: the supervisor stopped it after
// stall_detail; tail: the job's last standard error.
Failure failure_classify(int exit_code, int term_signal, bool stalled, const std::string& stall_detail,
                         const std::string& tail);

}  // namespace smelt
