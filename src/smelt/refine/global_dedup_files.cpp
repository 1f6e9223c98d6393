// Global dedup's inter-stage files: header, records, footer with count and checksum.
#include "smelt/refine/global_dedup_files.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace smelt::gd {

namespace {

constexpr char kMagic[8] = {'S', 'M', 'E', 'L', 'T', 'G', 'D', '1'};
constexpr char kEnd[8] = {'S', 'M', 'E', 'L', 'T', 'E', 'N', 'D'};
constexpr uint64_t kHeaderBytes = 32, kFooterBytes = 24, kRecBytes = 16;

void put32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
void put64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t get(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

const char* file_type_name(FileType t) {
  switch (t) {
    case FileType::kSignatures: return "signatures";
    case FileType::kPairs: return "pairs";
    case FileType::kLabels: return "cluster labels";
    case FileType::kDrops: return "drop list";
    case FileType::kSpill: return "spilled run";
  }
  return "?";
}

Writer::~Writer() {
  if (state_) XXH3_freeState(state_);
}

Status Writer::open(const std::string& path, FileType type, uint64_t fingerprint, uint64_t unit) {
  if (!state_) state_ = XXH3_createState();
  XXH3_64bits_reset(state_);
  count_ = 0;
  buf_.clear();
  if (Status s = file_.open(path); !s) return s;
  std::string h(kMagic, 8);
  put32(h, static_cast<uint32_t>(type));
  put32(h, kRecBytes);
  put64(h, fingerprint);
  put64(h, unit);
  return file_.write(h);
}

Status Writer::flush() {
  if (buf_.empty()) return Status::ok();
  static_assert(sizeof(Rec) == 16, "records are two packed little-endian words");
  std::string_view bytes(reinterpret_cast<const char*>(buf_.data()), buf_.size() * sizeof(Rec));
  XXH3_64bits_update(state_, bytes.data(), bytes.size());
  count_ += buf_.size();
  buf_.clear();
  return file_.write(bytes);
}

Status Writer::finish() {
  if (Status s = flush(); !s) return s;
  std::string f;
  put64(f, count_);
  put64(f, XXH3_64bits_digest(state_));
  f.append(kEnd, 8);
  if (Status s = file_.write(f); !s) return s;
  return file_.commit();
}

Reader::~Reader() {
  if (f_) std::fclose(f_);
  if (state_) XXH3_freeState(state_);
}

Status Reader::open(const std::string& path, FileType type, uint64_t fingerprint) {
  path_ = path;
  if (f_) std::fclose(f_);
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) return Status::error(fmt::format("{}: cannot open the {} file: {}", path, file_type_name(type), std::strerror(errno)));
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(path, ec);
  unsigned char h[kHeaderBytes], t[kFooterBytes];
  if (ec || size < kHeaderBytes + kFooterBytes || std::fread(h, 1, kHeaderBytes, f_) != kHeaderBytes)
    return Status::error(fmt::format("{}: truncated: {} bytes, shorter than a {} file's header and footer", path,
                                     ec ? 0 : size, file_type_name(type)));
  if (std::memcmp(h, kMagic, 8) != 0)
    return Status::error(fmt::format("{}: not a smelt dedup file (expected the magic SMELTGD1 at offset 0)", path));
  if (get(h + 8, 4) != static_cast<uint32_t>(type) || get(h + 12, 4) != kRecBytes)
    return Status::error(fmt::format("{}: a file of type {}, expected a {} file", path, get(h + 8, 4), file_type_name(type)));
  if (get(h + 16, 8) != fingerprint)
    return Status::error(fmt::format("{}: written for other inputs or settings (fingerprint {:016x}, this run {:016x})",
                                     path, get(h + 16, 8), fingerprint));
  unit_ = get(h + 24, 8);
  if (std::fseek(f_, static_cast<long>(size - kFooterBytes), SEEK_SET) != 0 || std::fread(t, 1, kFooterBytes, f_) != kFooterBytes ||
      std::memcmp(t + 16, kEnd, 8) != 0)
    return Status::error(fmt::format("{}: truncated or damaged: no footer (SMELTEND) at offset {}", path, size - kFooterBytes));
  count_ = get(t, 8);
  checksum_ = get(t + 8, 8);
  if (kHeaderBytes + kRecBytes * count_ + kFooterBytes != size)
    return Status::error(fmt::format("{}: {} bytes, but its footer counts {} records ({} bytes): truncated or damaged",
                                     path, size, count_, kHeaderBytes + kRecBytes * count_ + kFooterBytes));
  std::fseek(f_, static_cast<long>(kHeaderBytes), SEEK_SET);
  if (!state_) state_ = XXH3_createState();
  XXH3_64bits_reset(state_);
  done_ = 0;
  return Status::ok();
}

Status Reader::read(std::vector<Rec>& out, size_t max) {
  size_t n = static_cast<size_t>(std::min<uint64_t>(max, count_ - done_));
  out.resize(n);
  if (n == 0) {
    if (XXH3_64bits_digest(state_) != checksum_)
      return Status::error(fmt::format("{}: corrupted: the records' checksum does not match the footer's", path_));
    return Status::ok();
  }
  if (std::fread(out.data(), sizeof(Rec), n, f_) != n)
    return Status::error(fmt::format("{}: read failed at record {}: {}", path_, done_, std::strerror(errno)));
  XXH3_64bits_update(state_, out.data(), n * sizeof(Rec));
  done_ += n;
  return Status::ok();
}

Status read_all(const std::string& path, FileType type, uint64_t fingerprint, std::vector<Rec>& out) {
  Reader r;
  if (Status s = r.open(path, type, fingerprint); !s) return s;
  out.resize(r.count());
  std::vector<Rec> block;
  size_t at = 0;
  for (;;) {
    if (Status s = r.read(block, 1 << 16); !s) return s;
    if (block.empty()) return Status::ok();
    std::copy(block.begin(), block.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
    at += block.size();
  }
}

}  // namespace smelt::gd
