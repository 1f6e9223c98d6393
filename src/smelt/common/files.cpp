// Input expansion with std::filesystem and glob(3); atomic writes with POSIX fsync + rename.
#include "smelt/common/files.hpp"

#include <fcntl.h>
#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <xxhash.h>

namespace fs = std::filesystem;

namespace smelt {

namespace {

void add_path(const fs::path& p, std::vector<std::string>& out) {
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    // hidden entries (".prep-state.json", ".git/") are tools' own state, never input
    for (auto it = fs::recursive_directory_iterator(p, fs::directory_options::skip_permission_denied, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      if (it->path().filename().string().rfind('.', 0) == 0) {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec)) out.push_back(it->path().string());
    }
  } else if (fs::is_regular_file(p, ec)) {
    out.push_back(p.string());
  }
}

}  // namespace

Status files_expand_inputs(const std::vector<std::string>& patterns, std::vector<std::string>& out) {
  out.clear();
  for (const auto& pat : patterns) {
    size_t before = out.size();
    std::error_code ec;
    if (fs::exists(pat, ec)) {
      add_path(pat, out);
    } else if (pat.find_first_of("*?[") != std::string::npos) {
      glob_t g{};
      if (glob(pat.c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; ++i) add_path(g.gl_pathv[i], out);
      }
      globfree(&g);
    } else {
      return Status::error(fmt::format("input {}: no such file or folder", pat));
    }
    if (out.size() == before)
      return Status::error(fmt::format("input {}: matches no file", pat));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return Status::ok();
}

AtomicFile::~AtomicFile() { abort(); }

Status AtomicFile::open(const std::string& path) {
  abort();
  path_ = path;
  // pid and a per-process count: two threads of one process may replace the same file at once
  // (a background checkpoint and a synchronous one both updating `latest`)
  static std::atomic<uint64_t> count{0};
  tmp_ = fmt::format("{}.tmp-{}-{}", path, getpid(), count.fetch_add(1));
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) return Status::error(fmt::format("{}: cannot create: {}", tmp_, std::strerror(errno)));
  return Status::ok();
}

Status AtomicFile::write(std::string_view data) {
  if (!f_) return Status::error(fmt::format("{}: not open", path_));
  if (!data.empty() && std::fwrite(data.data(), 1, data.size(), f_) != data.size())
    return Status::error(fmt::format("{}: write failed: {}", tmp_, std::strerror(errno)));
  return Status::ok();
}

Status AtomicFile::commit() {
  if (!f_) return Status::error(fmt::format("{}: not open", path_));
  bool ok = std::fflush(f_) == 0 && fsync(fileno(f_)) == 0;
  int err = errno;
  ok = (std::fclose(f_) == 0) && ok;
  f_ = nullptr;
  if (!ok) {
    ::unlink(tmp_.c_str());
    return Status::error(fmt::format("{}: flush failed: {}", tmp_, std::strerror(err)));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    err = errno;
    ::unlink(tmp_.c_str());
    return Status::error(fmt::format("{}: rename failed: {}", path_, std::strerror(err)));
  }
  return files_fsync_dir(fs::path(path_).parent_path().string());
}

void AtomicFile::abort() {
  if (f_) {
    std::fclose(f_);
    f_ = nullptr;
    ::unlink(tmp_.c_str());
  }
}

Status files_write_atomic(const std::string& path, std::string_view data) {
  AtomicFile f;
  if (Status s = f.open(path); !s) return s;
  if (Status s = f.write(data); !s) return s;
  return f.commit();
}

Status files_read_small(const std::string& path, std::string& out) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  out.clear();
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  bool err = std::ferror(f);
  std::fclose(f);
  if (err) return Status::error(fmt::format("{}: read failed", path));
  return Status::ok();
}

Status files_fsync_dir(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Status::error(fmt::format("{}: cannot open folder: {}", dir, std::strerror(errno)));
  ::fsync(fd);
  ::close(fd);
  return Status::ok();
}

Status files_hash(const std::string& path, uint64_t& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(1 << 20);
  ssize_t n = 0;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) XXH3_64bits_update(st, buf.data(), static_cast<size_t>(n));
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  out = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (err) return Status::error(fmt::format("{}: read failed: {}", path, std::strerror(err)));
  return Status::ok();
}

}  // namespace smelt
