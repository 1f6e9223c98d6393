// The compressor yardstick (compressors.hpp): each tool reads the text on stdin and writes to a file
// whose size is its result.
#include "smelt/train/compressors.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "smelt/common/files.hpp"

extern char** environ;

namespace smelt {

namespace {

namespace fs = std::filesystem;

// Runs argv with stdin from `in` and stdout to `out`; stderr is dropped. Returns "" or why it failed.
std::string run_tool(const std::vector<std::string>& args, const std::string& in, const std::string& out) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return fmt::format("cannot run {}: {}", args[0], std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return fmt::format("{} is not installed", args[0]);
  return fmt::format("{} failed (status {})", args[0], status);
}

}  // namespace

std::vector<CompressorResult> compressors_measure(const std::string& text, const std::string& tmp_dir) {
  // {label words, then the flags that only route the output}
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> tools = {
      {{"gzip", "-9"}, {"-c"}}, {{"zstd", "-19"}, {"-c", "-q"}}, {{"xz", "-9e"}, {"-c"}}};
  std::vector<CompressorResult> out;
  const std::string stem = (fs::path(tmp_dir) / fmt::format(".compressors-{}", getpid())).string();
  const std::string in = stem + ".txt", packed = stem + ".out";
  const Status wrote = files_write_atomic(in, text);
  for (const auto& [setting, routing] : tools) {
    CompressorResult r;
    r.name = setting[0];
    std::vector<std::string> t = setting;
    t.insert(t.end(), routing.begin(), routing.end());
    for (size_t i = 0; i < setting.size(); i++) r.label += (i ? " " : "") + setting[i];
    for (size_t i = 0; i < t.size(); i++) r.command += (i ? " " : "") + t[i];
    r.bytes_in = text.size();
    const auto t0 = std::chrono::steady_clock::now();
    r.error = !wrote ? wrote.message() : text.empty() ? std::string("no text") : run_tool(t, in, packed);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r.error.empty()) {
      std::error_code ec;
      r.bytes_out = fs::file_size(packed, ec);
      if (ec) r.error = fmt::format("{}: {}", packed, ec.message());
      else r.bits_per_byte = 8.0 * (double)r.bytes_out / (double)r.bytes_in;
    }
    out.push_back(r);
  }
  std::error_code ec;
  fs::remove(in, ec);
  fs::remove(packed, ec);
  return out;
}

}  // namespace smelt
