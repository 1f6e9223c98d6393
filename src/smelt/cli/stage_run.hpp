// How `smelt prep` and `smelt tokenize` run their data stage once the flags are read: SIGINT and
// SIGTERM become the stage's stop request, a failure is logged (exit 1), the summary goes to stderr.
// Not the flags (each command's file) nor the stages (refine/prep, dataset/tokenize).
#pragma once
#include <cstdio>

#include "smelt/common/log.hpp"
#include "smelt/common/status.hpp"
#include "smelt/common/stop_signals.hpp"
#include "smelt/stage/stage.hpp"

namespace smelt {

// run(Summary&) -> Status runs the stage; Summary derives from StageSummary.
template <class Summary, class Run>
int cli_run_stage(Run run) {
  // taken by StopSignals' watcher thread, never by a worker; it raises the one stage stop flag
  StopSignals stop_signals(stage_request_stop);
  Summary summary;
  if (Status s = run(summary); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  std::fputs(summary.text.c_str(), stderr);
  return kExitOk;
}

}  // namespace smelt
