// What the callers of a data stage (prep, tokenize) see of the shared skeleton: the one stop
// request and the summary fields every stage fills. Not the skeleton itself (restartable_stage.hpp).
#pragma once
#include <atomic>
#include <string>

namespace smelt {

// The one stop flag of every data stage. stage_request_stop is async-signal-safe: the CLI passes it
// to StopSignals; tests call it. A stage clears the flag when its run starts, and when it finds the
// flag raised it stops at a clean point, keeps what it finished and says how to resume.
void stage_request_stop();
std::atomic<bool>& stage_stop_flag();

// What every stage's summary holds; a stage's summary derives from it.
struct StageSummary {
  bool already_complete = false;
  bool resumed = false;
  std::string stats_path;
  std::string text;  // the human-readable summary
};

}  // namespace smelt
