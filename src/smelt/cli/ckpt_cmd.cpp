// `smelt ckpt verify DIR` and `smelt ckpt list RUN [--json]`: checkpoint checks for people and
// scripts (exit 0 valid / some valid, 1 not valid / none valid, 2 usage). Not saving or loading
// (ckpt/checkpoint.cpp does both).
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/files.hpp"

namespace fs = std::filesystem;

namespace smelt {

namespace {

int verify_cmd(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    std::fprintf(stderr, "smelt ckpt verify: %s is not a folder\n", dir.c_str());
    return kExitUsage;
  }
  if (!fs::exists(fs::path(dir) / "manifest.json", ec) && fs::is_directory(fs::path(dir) / "checkpoints", ec)) {
    std::fprintf(stderr, "smelt ckpt verify: %s is a run folder; pass one of its checkpoints/step_* folders "
                 "(see smelt ckpt list %s)\n", dir.c_str(), dir.c_str());
    return kExitUsage;
  }
  Status s = ckpt_verify(dir);
  if (!s) {
    std::fprintf(stderr, "%s: NOT valid: %s\n", dir.c_str(), s.message().c_str());
    return kExitFailure;
  }
  CkptManifest m;
  if (Status r = ckpt_read_manifest(dir, m); !r) {  // verified a moment ago: only a concurrent change gets here
    std::fprintf(stderr, "%s: %s\n", dir.c_str(), r.message().c_str());
    return kExitFailure;
  }
  int64_t bytes = 0;
  for (const auto& f : m.files) bytes += f.size;
  std::printf("%s: valid (step %lld, %d rank%s, %zu files, %zu tensors, %.1f MB, every CRC32C matches)\n",
              dir.c_str(), static_cast<long long>(m.step), m.ranks, m.ranks == 1 ? "" : "s", m.files.size(),
              m.tensors.size(), bytes / 1e6);
  return kExitOk;
}

int list_cmd(const std::string& run, bool as_json) {
  std::error_code ec;
  if (!fs::is_directory(run, ec)) {
    std::fprintf(stderr, "smelt ckpt list: %s is not a folder\n", run.c_str());
    return kExitUsage;
  }
  std::vector<CkptListEntry> list = ckpt_list(run);
  std::string latest;
  if (files_read_small((fs::path(run) / "checkpoints" / "latest").string(), latest))
    while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ')) latest.pop_back();
  bool any_valid = false;
  for (const auto& e : list) any_valid |= e.valid;
  if (as_json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const auto& e : list) {
      nlohmann::ordered_json o = {{"step", e.step}, {"dir", e.dir}, {"bytes", e.bytes}, {"valid", e.valid},
                                  {"latest", fs::path(e.dir).filename().string() == latest}};
      if (!e.valid) o["problem"] = e.problem;
      j.push_back(o);
    }
    std::printf("%s\n", j.dump(1).c_str());
  } else if (list.empty()) {
    std::printf("no checkpoints in %s\n", (fs::path(run) / "checkpoints").string().c_str());
  } else {
    std::printf("%12s %12s  %-7s %s\n", "step", "MB", "valid", "folder");
    for (const auto& e : list) {
      std::string name = fs::path(e.dir).filename().string();
      std::printf("%12lld %12.1f  %-7s %s%s\n", static_cast<long long>(e.step), e.bytes / 1e6,
                  e.valid ? "yes" : "NO", name.c_str(), name == latest ? "  (latest)" : "");
      if (!e.valid) std::printf("%34s%s\n", "", e.problem.c_str());
    }
  }
  return any_valid ? kExitOk : kExitFailure;
}

}  // namespace

int cli_ckpt(int argc, char** argv) {
  CLI::App app{"smelt ckpt: check checkpoints (verify one, list a run's)"};
  app.name("smelt ckpt");
  app.require_subcommand(1);
  std::string dir, run;
  bool as_json = false;
  CLI::App* verify = app.add_subcommand(
      "verify", "check a checkpoint folder: manifest, every file's size and CRC32C, every tensor; exit 0 valid, 1 not");
  verify->add_option("DIR", dir, "a checkpoint folder (RUN/checkpoints/step_XXXXXXXX)")->required();
  CLI::App* list = app.add_subcommand(
      "list", "every checkpoint of a run, newest first, with size and validity; exit 0 when one is valid, 1 when none");
  list->add_option("RUN", run, "the run folder (holding checkpoints/)")->required();
  list->add_flag("--json", as_json, "print a JSON array instead of a table");
  if (int rc = cli_parse_args(app, argc, argv); rc >= 0) return rc;
  if (verify->parsed()) return verify_cmd(dir);
  return list_cmd(run, as_json);
}

}  // namespace smelt
