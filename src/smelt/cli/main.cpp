// The light `smelt` binary: runs prep, tokenizer and tokenize itself and execs `smelt-full` (the
// file next to it) for every other command. It links no MPI, BLAS, OpenMP or oneDNN, so their
// loading and constructors never cost a tokenizer run; see command_table.hpp.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "smelt/cli/command_table.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/status.hpp"

namespace {

#define SMELT_ENTRY_LIGHT(fn) &smelt::fn
#define SMELT_ENTRY_FULL(fn) nullptr
#define SMELT_LIGHT_ROW(name, fn, where, summary) {name, summary, SMELT_ENTRY_##where(fn)},
constexpr smelt::Command kCommands[] = {SMELT_COMMANDS(SMELT_LIGHT_ROW)};

// The path of smelt-full: the directory of this executable (symlinks resolved) + its file name.
std::string full_binary_path() {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return smelt::kFullBinaryName;
  std::string dir(self, static_cast<size_t>(n));
  dir.resize(dir.rfind('/') + 1);
  return dir + smelt::kFullBinaryName;
}

// Replaces this process with smelt-full, argv unchanged: same pid (so signals sent to `smelt`
// reach the command), same stdin/stdout, and its exit status is the one the caller sees.
int exec_full(int argc, char** argv) {
  std::string path = full_binary_path();
  execv(path.c_str(), argv);
  int err = errno;
  if (err == ENOENT)
    std::fprintf(stderr,
                 "smelt: '%s' runs in the full binary %s, which is missing; build it beside smelt "
                 "(make build, or cmake --build BUILD_DIR --target smelt-full)\n",
                 argv[1], path.c_str());
  else
    std::fprintf(stderr, "smelt: cannot start the full binary %s for '%s': %s\n", path.c_str(),
                 argv[1], std::strerror(err));
  return smelt::kExitFailure;
}

}  // namespace

int main(int argc, char** argv) { return smelt::cli_main(kCommands, argc, argv, exec_full); }
