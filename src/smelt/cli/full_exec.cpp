// smelt -> smelt-full (full_exec.hpp).
#include "smelt/cli/full_exec.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "smelt/cli/command_table.hpp"
#include "smelt/common/status.hpp"

namespace smelt {

namespace {

// The path of smelt-full: the directory of this executable (symlinks resolved) + its file name.
std::string full_binary_path() {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return kFullBinaryName;
  std::string dir(self, static_cast<size_t>(n));
  dir.resize(dir.rfind('/') + 1);
  return dir + kFullBinaryName;
}

}  // namespace

// Same pid (so signals sent to `smelt` reach the command), same stdin/stdout, and its exit status
// is the one the caller sees.
int exec_full_binary(int argc, char** argv) {
  (void)argc;
  std::string path = full_binary_path();
  execv(path.c_str(), argv);
  int err = errno;
  if (err == ENOENT)
    std::fprintf(stderr,
                 "smelt: '%s' runs in the full binary %s, which is missing; build it beside smelt "
                 "(make build, or cmake --build BUILD_DIR --target smelt-full)\n",
                 argv[1], path.c_str());
  else
    std::fprintf(stderr, "smelt: cannot start the full binary %s for '%s': %s\n", path.c_str(), argv[1],
                 std::strerror(err));
  return kExitFailure;
}

}  // namespace smelt
