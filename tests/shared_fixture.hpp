// A fixture that several test processes share: built once per build of the binaries it depends
// on, into the build folder, by whichever process comes first (the others wait on a lock), and
// read by all of them. ctest runs each test case as its own process; a fixture that trains a model
// would otherwise be made again for every case.
#pragma once
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>
#include <cstdio>
#include <system_error>

#include <fmt/format.h>

namespace smelt::test {

// BUILD/test-fixtures/NAME-KEY, made by `build(dir)` when not there yet. KEY: the size and time of
// every file in `depends_on` (a rebuilt binary makes a fresh fixture). `build` writes into the
// fixture's own folder (files made there may name their paths), which counts as made only when a
// `.done` file is there: one left without it (a killed build) is made again. `build` returns false
// (after reporting a failure) when the fixture could not be made, and then "" comes back.
inline std::string shared_fixture(const std::string& name, const std::vector<std::string>& depends_on,
                                  const std::function<bool(const std::filesystem::path&)>& build) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(SMELT_BINARY).parent_path() / "test-fixtures";
  std::error_code ec;
  fs::create_directories(root, ec);
  uint64_t key = 1469598103934665603ull;
  auto mix = [&key](uint64_t v) { key = (key ^ v) * 1099511628211ull; };
  for (const auto& f : depends_on) {
    mix(fs::file_size(f, ec));
    mix((uint64_t)fs::last_write_time(f, ec).time_since_epoch().count());
  }
  const fs::path dir = root / fmt::format("{}-{:016x}", name, key);
  const int lock = ::open((root / (name + ".lock")).c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) return "";
  std::string out = dir.string();
  if (!fs::exists(dir / ".done")) {
    for (const auto& e : fs::directory_iterator(root, ec))  // the fixtures of earlier builds
      if (e.is_directory() && e.path().filename().string().rfind(name + "-", 0) == 0) fs::remove_all(e.path(), ec);
    fs::create_directories(dir);
    if (build(dir)) {
      std::FILE* f = std::fopen((dir / ".done").c_str(), "w");
      if (f) std::fclose(f);
    } else {
      fs::remove_all(dir, ec);
      out.clear();
    }
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return out;
}

}  // namespace smelt::test
