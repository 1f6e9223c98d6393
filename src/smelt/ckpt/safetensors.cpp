// safetensors writer (POSIX write + fsync, CRC32C per chunk while the bytes are in cache) and
// reader (pread; header parsed with nlohmann_json and checked field by field against the file).
// Little-endian hosts only (x86, arm64), like every safetensors producer.
#include "smelt/ckpt/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/crc32c.hpp"

namespace smelt {

namespace {

// Bounce buffer size: one O_DIRECT write each; big enough for full device bandwidth, small enough
// that the copy and the CRC pass stay in cache and that a writer adds only 8 MiB to the process
// (export keeps its peak near one tensor: tests/ckpt/export_hf_test).
constexpr size_t kBounce = 4 << 20;
constexpr size_t kAlign = 4096;  // O_DIRECT alignment of memory, offsets and lengths
constexpr int64_t kMaxHeader = 100 << 20;

int dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

}  // namespace

int64_t safetensors_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > (int64_t{1} << 60) / d) return -1;
    n *= d;
  }
  return n;
}

SafetensorsWriter::~SafetensorsWriter() {
  close_file();
  std::free(bounce_[0]);
  std::free(bounce_[1]);
}

void SafetensorsWriter::close_file() {
  if (io_.joinable()) io_.join();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status SafetensorsWriter::open(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  close_file();
  path_ = path;
  tensors_ = tensors;
  next_ = 0;
  pos_ = flushed_ = 0;
  fill_ = 0;
  cur_ = 0;
  file_crc_ = 0;
  io_status_ = Status::ok();
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = h["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  int64_t off = 0;
  for (auto& t : tensors_) {
    if (t.name.empty() || t.name == "__metadata__" || h.contains(t.name))
      return Status::error(fmt::format("{}: tensor name '{}' is empty, reserved or repeated", path, t.name));
    int64_t n = safetensors_numel(t.shape);
    if (n < 0) return Status::error(fmt::format("{}: tensor {}: invalid shape", path, t.name));
    t.dtype = "F32";
    auto& e = h[t.name];
    e["dtype"] = "F32";
    e["shape"] = t.shape;
    e["data_offsets"] = {off, off + 4 * n};
    t.begin = off;  // relative until the header size is known
    t.end = off + 4 * n;
    off = t.end;
  }
  std::string js = h.dump();
  js.append((8 - (8 + js.size()) % 8) % 8, ' ');  // data starts 8-byte aligned
  int64_t data_start = 8 + static_cast<int64_t>(js.size());
  for (auto& t : tensors_) t.begin += data_start, t.end += data_start;

  for (char*& b : bounce_)
    if (!b && !(b = static_cast<char*>(std::aligned_alloc(kAlign, kBounce))))
      return Status::error(fmt::format("{}: cannot allocate {} MiB of write buffers", path, 2 * kBounce >> 20));
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::error(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
  uint64_t n = js.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  if (Status s = write_bytes(len, 8, nullptr); !s) return s;
  return write_bytes(js.data(), static_cast<int64_t>(js.size()), nullptr);
}

Status SafetensorsWriter::write_bytes(const void* data, int64_t n, uint32_t* tensor_crc) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t c = std::min(static_cast<size_t>(n), kBounce - fill_);
    char* dst = bounce_[cur_] + fill_;
    std::memcpy(dst, p, c);
    // one CRC pass over the copy while it is in cache; the tensor's and the file's running CRCs
    // are extended by combining
    uint32_t cc = crc32c_update(0, dst, c);
    if (tensor_crc) *tensor_crc = crc32c_combine(*tensor_crc, cc, c);
    file_crc_ = crc32c_combine(file_crc_, cc, c);
    fill_ += c;
    p += c;
    n -= static_cast<int64_t>(c);
    pos_ += static_cast<int64_t>(c);
    if (fill_ == kBounce)
      if (Status s = flush(false); !s) return s;
  }
  return Status::ok();
}

Status SafetensorsWriter::join_io() {
  if (io_.joinable()) io_.join();
  return io_status_;
}

// Hands the current bounce buffer to the io thread (after the previous write finished) and
// switches to the other one. The last, partial buffer is zero-padded to the O_DIRECT alignment;
// finish() truncates the file back to its size.
Status SafetensorsWriter::flush(bool last) {
  if (Status s = join_io(); !s) return s;
  if (fill_ == 0) return Status::ok();
  size_t len = fill_;
  if (last && direct_ && len % kAlign) {
    size_t padded = (len + kAlign - 1) / kAlign * kAlign;
    std::memset(bounce_[cur_] + len, 0, padded - len);
    len = padded;
  }
  const char* buf = bounce_[cur_];
  int64_t off = flushed_;
  io_ = std::thread([this, buf, len, off] {
    size_t done = 0;
    while (done < len) {
      ssize_t w = ::pwrite(fd_, buf + done, len - done, off + static_cast<int64_t>(done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EINVAL && direct_) {  // the filesystem refused O_DIRECT after all
        ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT);
        direct_ = false;
        continue;
      }
      if (w <= 0) {
        io_status_ = Status::error(fmt::format("{}: write failed at byte {}: {}", path_, off + static_cast<int64_t>(done),
                                               w < 0 ? std::strerror(errno) : "wrote nothing"));
        return;
      }
      done += static_cast<size_t>(w);
    }
  });
  flushed_ += static_cast<int64_t>(fill_);
  fill_ = 0;
  cur_ ^= 1;
  return Status::ok();
}

Status SafetensorsWriter::write_next(const float* data) {
  if (fd_ < 0) return Status::error(fmt::format("{}: not open", path_));
  if (next_ >= tensors_.size()) return Status::error(fmt::format("{}: every tensor is already written", path_));
  SafetensorsTensor& t = tensors_[next_++];
  t.crc32c = 0;
  return write_bytes(data, t.bytes(), &t.crc32c);
}

Status SafetensorsWriter::finish() {
  if (fd_ < 0) return Status::error(fmt::format("{}: not open", path_));
  if (next_ != tensors_.size())
    return Status::error(fmt::format("{}: {} of {} tensors written", path_, next_, tensors_.size()));
  Status s = flush(true);
  if (s) s = join_io();
  if (s && ::ftruncate(fd_, pos_) != 0)  // drop the O_DIRECT padding
    s = Status::error(fmt::format("{}: truncate to {} bytes failed: {}", path_, pos_, std::strerror(errno)));
  if (s && ::fsync(fd_) != 0) s = Status::error(fmt::format("{}: fsync failed: {}", path_, std::strerror(errno)));
  if (::close(fd_) != 0 && s) s = Status::error(fmt::format("{}: close failed: {}", path_, std::strerror(errno)));
  fd_ = -1;
  return s;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsTensor* SafetensorsReader::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

Status SafetensorsReader::read_at(int64_t offset, void* out, int64_t bytes) const {
  char* p = static_cast<char*>(out);
  int64_t done = 0;
  while (done < bytes) {
    ssize_t r = ::pread(fd_, p + done, static_cast<size_t>(bytes - done), offset + done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return Status::error(fmt::format("{}: read failed at byte {}: {}", path_, offset + done, std::strerror(errno)));
    if (r == 0)
      return Status::error(fmt::format("{}: file ends at byte {}, expected {} bytes at byte {}", path_,
                                       offset + done, bytes, offset));
    done += r;
  }
  return Status::ok();
}

Status SafetensorsReader::open(const std::string& path) {
  if (fd_ >= 0) ::close(fd_);
  path_ = path;
  tensors_.clear();
  metadata_.clear();
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return Status::error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return Status::error(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)));
  file_size_ = st.st_size;
  if (file_size_ < 8)
    return Status::error(fmt::format("{}: {} bytes, too short for the 8-byte header length", path, file_size_));
  uint8_t len[8];
  if (Status s = read_at(0, len, 8); !s) return s;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{len[i]} << (8 * i);
  if (n < 2 || n > static_cast<uint64_t>(std::min(kMaxHeader, file_size_ - 8)))
    return Status::error(fmt::format("{}: byte 0: header length {} does not fit the file ({} bytes)", path, n,
                                     file_size_));
  data_start_ = 8 + static_cast<int64_t>(n);
  std::string js(n, '\0');
  if (Status s = read_at(8, js.data(), static_cast<int64_t>(n)); !s) return s;
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(js);
  } catch (const nlohmann::json::parse_error& e) {
    return Status::error(fmt::format("{}: header JSON invalid at byte {}: {}", path, 8 + e.byte, e.what()));
  }
  if (!h.is_object()) return Status::error(fmt::format("{}: byte 8: header is not a JSON object", path));
  int64_t data_size = file_size_ - data_start_;
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) return Status::error(fmt::format("{}: __metadata__ is not an object", path));
      for (const auto& [k, v] : e.items()) {
        if (!v.is_string()) return Status::error(fmt::format("{}: __metadata__.{} is not a string", path, k));
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) {
      return Status::error(fmt::format("{}: tensor {}: {}", path, name, what));
    };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      return bad("expected an object with dtype, shape and data_offsets");
    SafetensorsTensor t;
    t.name = name;
    if (!e["dtype"].is_string() || dtype_size(e["dtype"].get<std::string>()) == 0)
      return bad(fmt::format("unknown dtype {}", e["dtype"].dump()));
    t.dtype = e["dtype"].get<std::string>();
    if (!e["shape"].is_array()) return bad("shape is not an array");
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad("shape has a non-integer or negative entry");
      t.shape.push_back(d.get<int64_t>());
    }
    const auto& o = e["data_offsets"];
    if (!o.is_array() || o.size() != 2 || !o[0].is_number_integer() || !o[1].is_number_integer())
      return bad("data_offsets is not [begin, end]");
    int64_t b = o[0].get<int64_t>(), en = o[1].get<int64_t>();
    int64_t numel = safetensors_numel(t.shape);
    if (b < 0 || en < b || en > data_size)
      return bad(fmt::format("data_offsets [{}, {}] outside the {} data bytes", b, en, data_size));
    if (numel < 0 || en - b != numel * dtype_size(t.dtype))
      return bad(fmt::format("data_offsets [{}, {}] hold {} bytes, shape x {} needs {}", b, en, en - b, t.dtype,
                             numel < 0 ? -1 : numel * dtype_size(t.dtype)));
    t.begin = data_start_ + b;
    t.end = data_start_ + en;
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;  // empty tensors first
            });
  int64_t expect = data_start_;
  for (const auto& t : tensors_) {
    if (t.begin != expect)
      return Status::error(fmt::format("{}: tensor {} starts at byte {}, expected {} (hole or overlap)", path,
                                       t.name, t.begin, expect));
    expect = t.end;
  }
  if (expect != file_size_)
    return Status::error(fmt::format("{}: data ends at byte {} but the file has {} bytes", path, expect, file_size_));
  return Status::ok();
}

}  // namespace smelt
