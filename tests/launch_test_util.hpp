// Shared by the tests of `smelt launch`: the ranks of a supervised job found in /proc, and what
// its run folder's metrics.jsonl says (the newest step, events of a kind, the step lines). Not
// product code.
#pragma once
#include <sys/types.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_files.hpp"
#include "train_test_util.hpp"

namespace smelt::test {

// A fault to inject from outside once the run reaches a step.
struct Fault {
  int64_t at_step;
  std::string kind;
  int rank;
};

// `kinds` in order at seeded random steps: each gap + [0, spread) steps after the previous, on a
// random rank of `ranks`.
inline std::vector<Fault> fault_schedule(unsigned seed, const std::vector<std::string>& kinds, int gap, int spread,
                                         int ranks) {
  std::mt19937 rng(seed);
  std::vector<Fault> faults;
  int64_t at = 0;
  for (const auto& k : kinds) {
    at += gap + (int64_t)(rng() % (unsigned)spread);
    faults.push_back({at, k, (int)(rng() % (unsigned)ranks)});
  }
  return faults;
}

// The ranks of the job training in `run` now: rank -> pid (processes whose command line names the
// run folder and whose environment has an Open MPI rank).
inline std::map<int, pid_t> ranks_of(const std::filesystem::path& run) {
  std::map<int, pid_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_file((e.path() / "cmdline").string());
    for (char& c : cmd) c = c == '\0' ? ' ' : c;
    if (cmd.find(" train ") == std::string::npos || cmd.find(run.string() + " ") == std::string::npos) continue;
    if (cmd.rfind("mpirun", 0) == 0 || cmd.find("launch ") != std::string::npos) continue;
    const std::string env = read_file((e.path() / "environ").string());
    const size_t at = env.find("OMPI_COMM_WORLD_RANK=");
    if (at == std::string::npos) continue;
    std::string stat = read_file((e.path() / "stat").string());  // skip zombies
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] == 'Z') continue;
    out[std::atoi(env.c_str() + at + 21)] = (pid_t)std::stoi(name);
  }
  return out;
}

// The newest step line in RUN/metrics.jsonl (-1: none).
inline int64_t last_step(const std::filesystem::path& run) {
  std::ifstream in(run / "metrics.jsonl");
  std::string line;
  int64_t last = -1;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && !j.contains("event") && j.contains("step")) last = j["step"].get<int64_t>();
  }
  return last;
}

// The newest step of the current attempt: the last step line after the last restart event in
// RUN/metrics.jsonl (-1: none yet; the lines of an earlier attempt before its resume cut them).
inline int64_t attempt_step(const std::filesystem::path& run) {
  std::ifstream in(run / "metrics.jsonl");
  int64_t last = -1;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    if (j.value("event", "") == "restart") last = -1;
    else if (!j.contains("event") && j.contains("step")) last = j["step"].get<int64_t>();
  }
  return last;
}

// The event lines of `kind` in RUN/metrics.jsonl (a line still being written is skipped).
inline std::vector<nlohmann::json> events(const std::filesystem::path& run, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("event", "") == kind) out.push_back(j);
  }
  return out;
}

// The step lines of RUN/metrics.jsonl without their timing fields.
inline std::vector<nlohmann::json> step_lines(const std::filesystem::path& run) {
  std::vector<nlohmann::json> out;
  for (const auto& j : read_metrics(run))
    if (!j.contains("event")) out.push_back(j);
  return out;
}

}  // namespace smelt::test
