// What every subcommand shares: CLI11's parse with Smelt's exit codes, the --log-level flag with
// the logging set-up, and the running binary's path (for subcommands that start smelt again) and
// how a person types it. Not the subcommands' own flags.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "smelt/common/log.hpp"
#include "smelt/common/status.hpp"

namespace smelt {

// Parses argv. Returns -1 to go on, else the exit code to return: 0 after --help, 2 on a usage
// error (CLI11 has printed the message).
inline int cli_parse_args(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  return -1;
}

// The same after adding --log-level (default `level`); on success logging is set up for `stage`.
inline int cli_parse(CLI::App& app, int argc, char** argv, const char* stage, const char* level = "info") {
  std::string log_level = level;
  app.add_option("--log-level", log_level, "debug, info, warn, error");
  if (int rc = cli_parse_args(app, argc, argv); rc >= 0) return rc;
  log_setup(stage, log_level);
  return -1;
}

// This binary (/proc/self/exe), or "smelt" where /proc does not say.
inline std::string cli_self_exe() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("smelt") : p.string();
}

// How a person in the working directory types the `smelt` beside this binary (for commands a
// summary suggests): "smelt" when the one on PATH is that file; else its path, relative
// ("build/smelt", "./smelt") when it lies below the working directory, absolute otherwise.
inline std::string cli_smelt_command() {
  namespace fs = std::filesystem;
  const fs::path self = cli_self_exe();
  if (!self.has_parent_path()) return "smelt";  // /proc did not say
  std::error_code ec;
  fs::path light = self.parent_path() / "smelt";
  if (!fs::exists(light, ec)) light = self;
  if (const char* path = std::getenv("PATH")) {
    std::string dirs = path;
    for (size_t b = 0, e; b <= dirs.size(); b = e + 1) {
      e = dirs.find(':', b);
      if (e == std::string::npos) e = dirs.size();
      if (e > b && fs::equivalent(fs::path(dirs.substr(b, e - b)) / "smelt", light, ec)) return "smelt";
    }
  }
  const fs::path rel = light.lexically_relative(fs::current_path(ec));
  if (ec || rel.empty() || *rel.begin() == "..") return light.string();
  return rel.has_parent_path() ? rel.string() : "./" + rel.string();
}

}  // namespace smelt
