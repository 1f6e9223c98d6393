// A full disk for tests: this test binary runs one of its own tests inside a user and mount
// namespace where a 2 MiB tmpfs is mounted (no root needed, where the kernel allows such
// namespaces). Not for product code.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_files.hpp"

namespace smelt::test {

// Whether this machine lets an unprivileged process create user and mount namespaces.
inline bool small_fs_available() {
  return std::system("unshare --user --map-root-user --mount true 2>/dev/null") == 0;
}

// Mounts a 2 MiB tmpfs on `mnt` in a new namespace and runs this binary's test `filter` there with
// env_var=mnt in its environment; its stdout and stderr go to `log` and are returned in `out`.
// Returns the wait status (std::system's).
inline int run_in_small_fs(const std::string& mnt, const char* env_var, const char* filter, const std::string& log,
                           std::string& out) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = "unshare --user --map-root-user --mount sh -c 'mount -t tmpfs -o size=2m tmpfs " + mnt +
                          " && " + env_var + "=" + mnt + " " + self + " --gtest_filter=" + filter + "' > " + log +
                          " 2>&1";
  const int st = std::system(cmd.c_str());
  out = read_file(log);
  return st;
}

}  // namespace smelt::test
