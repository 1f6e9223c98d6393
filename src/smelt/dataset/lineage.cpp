// The .docs lineage sidecar: streaming writer (resumable by scanning its own entries) and mmap
// reader. Layout: lineage.hpp.
#include "smelt/dataset/lineage.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "smelt/common/files.hpp"

namespace fs = std::filesystem;

namespace smelt {

std::string lineage_path(const std::string& prefix) { return prefix + ".docs"; }

LineageWriter::~LineageWriter() {
  if (f_) std::fclose(f_);
}

Status LineageWriter::open(const std::string& path) {
  abort();
  path_ = path;
  offsets_.clear();
  f_ = std::fopen(partial_path().c_str(), "wb");
  if (!f_) return Status::error(fmt::format("{}: cannot create: {}", partial_path(), std::strerror(errno)));
  char header[kLineageHeaderBytes] = {};  // filled by finish()
  if (std::fwrite(header, 1, sizeof header, f_) != sizeof header)
    return Status::error(fmt::format("{}: write failed: {}", partial_path(), std::strerror(errno)));
  bytes_ = kLineageHeaderBytes;
  return Status::ok();
}

Status LineageWriter::resume(const std::string& path, uint64_t bytes, uint64_t count) {
  abort();
  path_ = path;
  offsets_.clear();
  std::FILE* in = std::fopen(partial_path().c_str(), "rb");
  if (!in) return Status::error(fmt::format("{}: cannot open for resume: {}", partial_path(), std::strerror(errno)));
  uint64_t at = kLineageHeaderBytes;
  bool ok = std::fseek(in, static_cast<long>(at), SEEK_SET) == 0;
  while (ok && at < bytes) {
    uint32_t len = 0;
    if (std::fread(&len, 4, 1, in) != 1 || std::fseek(in, len, SEEK_CUR) != 0) {
      ok = false;
      break;
    }
    offsets_.push_back(at);
    at += 4ull + len;
  }
  std::fclose(in);
  if (!ok || at != bytes || offsets_.size() != count)
    return Status::error(fmt::format("{}: does not hold the {} entries ({} bytes) the resume point says (found {} "
                                     "entries, {} bytes)", partial_path(), count, bytes, offsets_.size(), at));
  if (truncate(partial_path().c_str(), static_cast<off_t>(bytes)) != 0)
    return Status::error(fmt::format("{}: cannot cut back to {} bytes: {}", partial_path(), bytes,
                                     std::strerror(errno)));
  f_ = std::fopen(partial_path().c_str(), "r+b");
  if (!f_ || std::fseek(f_, 0, SEEK_END) != 0)
    return Status::error(fmt::format("{}: cannot reopen: {}", partial_path(), std::strerror(errno)));
  bytes_ = bytes;
  return Status::ok();
}

Status LineageWriter::add(std::string_view id) {
  if (!f_) return Status::error(fmt::format("{}: writer is not open", partial_path()));
  if (id.size() > 0xFFFFFFFFu) return Status::error(fmt::format("{}: a document id of {} bytes", partial_path(), id.size()));
  const uint32_t len = static_cast<uint32_t>(id.size());
  if (std::fwrite(&len, 4, 1, f_) != 1 || (len > 0 && std::fwrite(id.data(), 1, len, f_) != len))
    return Status::error(fmt::format("{}: write failed: {}", partial_path(), std::strerror(errno)));
  offsets_.push_back(bytes_);
  bytes_ += 4ull + len;
  return Status::ok();
}

Status LineageWriter::sync() {
  if (!f_) return Status::error(fmt::format("{}: writer is not open", partial_path()));
  if (std::fflush(f_) != 0 || fsync(fileno(f_)) != 0)
    return Status::error(fmt::format("{}: flush failed: {}", partial_path(), std::strerror(errno)));
  return Status::ok();
}

Status LineageWriter::finish() {
  if (!f_) return Status::error(fmt::format("{}: writer is not open", partial_path()));
  const uint64_t table_offset = bytes_;
  bool ok = true;
  for (uint64_t o : offsets_) ok = ok && std::fwrite(&o, 8, 1, f_) == 1;
  ok = ok && std::fwrite(&table_offset, 8, 1, f_) == 1;
  // the header last: until here N and T are zero, which no reader accepts
  char header[kLineageHeaderBytes] = {};
  std::memcpy(header, kLineageMagic, 8);
  const uint32_t version = kLineageVersion;
  const uint64_t n = offsets_.size();
  std::memcpy(header + 8, &version, 4);
  std::memcpy(header + 16, &n, 8);
  std::memcpy(header + 24, &table_offset, 8);
  ok = ok && std::fflush(f_) == 0 && std::fseek(f_, 0, SEEK_SET) == 0 &&
       std::fwrite(header, 1, sizeof header, f_) == sizeof header;
  ok = ok && std::fflush(f_) == 0 && fsync(fileno(f_)) == 0;
  ok = std::fclose(f_) == 0 && ok;
  f_ = nullptr;
  if (!ok) return Status::error(fmt::format("{}: write failed: {}", partial_path(), std::strerror(errno)));
  if (std::rename(partial_path().c_str(), path_.c_str()) != 0)
    return Status::error(fmt::format("{}: cannot rename to {}: {}", partial_path(), path_, std::strerror(errno)));
  return files_fsync_dir(fs::path(path_).parent_path().empty() ? "." : fs::path(path_).parent_path().string());
}

void LineageWriter::abort() {
  if (f_) {
    std::fclose(f_);
    f_ = nullptr;
    std::error_code ec;
    fs::remove(partial_path(), ec);
  }
}

LineageReader::~LineageReader() { close(); }

void LineageReader::close() {
  if (map_) munmap(map_, size_);
  map_ = nullptr;
  size_ = 0;
  count_ = table_offset_ = 0;
}

uint64_t LineageReader::table(uint64_t i) const {
  uint64_t v;
  std::memcpy(&v, static_cast<const char*>(map_) + table_offset_ + 8 * i, 8);
  return v;
}

Status LineageReader::open(const std::string& path) {
  close();
  path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  fstat(fd, &st);
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < kLineageHeaderBytes + 8) {
    ::close(fd);
    return Status::error(fmt::format("{}: {} bytes, shorter than the smallest lineage file ({}); truncated?", path,
                                     size_, kLineageHeaderBytes + 8));
  }
  void* p = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    size_ = 0;
    return Status::error(fmt::format("{}: cannot map: {}", path, std::strerror(errno)));
  }
  map_ = p;
  const char* b = static_cast<const char*>(map_);
  uint32_t version;
  std::memcpy(&version, b + 8, 4);
  std::memcpy(&count_, b + 16, 8);
  std::memcpy(&table_offset_, b + 24, 8);
  auto fail = [&](std::string msg) {
    close();
    return Status::error(std::move(msg));
  };
  if (std::memcmp(b, kLineageMagic, 8) != 0)
    return fail(fmt::format("{}: offset 0: not a Smelt lineage file (expected the magic \"SMELTDOC\")", path));
  if (version != kLineageVersion)
    return fail(fmt::format("{}: offset 8: version {}, expected {}", path, version, kLineageVersion));
  if (table_offset_ < kLineageHeaderBytes || count_ > (size_ / 8) ||
      table_offset_ + 8 * (count_ + 1) != size_)
    return fail(fmt::format("{}: {} bytes, but its header ({} ids, table at {}) needs {} (truncated or unfinished?)",
                            path, size_, count_, table_offset_, table_offset_ + 8 * (count_ + 1)));
  // entries follow each other: entry i+1 starts where entry i's id ends
  uint64_t expect = kLineageHeaderBytes;
  for (uint64_t i = 0; i <= count_; ++i) {
    if (table(i) != expect)
      return fail(fmt::format("{}: offset {}: table entry {} is {}, expected {}", path, table_offset_ + 8 * i, i,
                              table(i), expect));
    if (i == count_) break;
    uint32_t len = 0;
    if (expect + 4 <= table_offset_) std::memcpy(&len, b + expect, 4);
    if (expect + 4 + uint64_t{len} > table_offset_)
      return fail(fmt::format("{}: offset {}: entry {} runs past the table at {}", path, expect, i, table_offset_));
    expect += 4 + uint64_t{len};
  }
  if (expect != table_offset_)
    return fail(fmt::format("{}: the entries end at {}, not at the table ({})", path, expect, table_offset_));
  return Status::ok();
}

std::string_view LineageReader::id_of(uint64_t i) const {
  const char* b = static_cast<const char*>(map_);
  const uint64_t at = table(i);
  uint32_t len;
  std::memcpy(&len, b + at, 4);
  return std::string_view(b + at + 4, len);
}

Status LineageReader::id_checked(uint64_t i, std::string_view& out) const {
  if (i >= count_)
    return Status::error(fmt::format("{}: sequence {} requested, the file lists {}", path_, i, count_));
  out = id_of(i);
  return Status::ok();
}

}  // namespace smelt
