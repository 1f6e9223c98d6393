// safetensors writer (pwrite from an io thread, O_DIRECT where allowed, CRC32C computed by the
// caller's thread while the io thread writes, one fsync per file) and reader (pread; header parsed
// with nlohmann_json and checked field by field against the file).
// Little-endian hosts only (x86, arm64), like every safetensors producer.
#include "smelt/ckpt/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
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

// Write buffer size: one O_DIRECT write each; big enough for full device bandwidth, small enough
// that the copy stays in cache and that a writer adds only 8 MiB to the process (export keeps its
// peak near one tensor: tests/ckpt/export_hf_test).
constexpr size_t kBounce = 4 << 20;
constexpr size_t kAlign = 4096;  // O_DIRECT alignment of memory, offsets and lengths
constexpr size_t kHugePage = 2 << 20;
// Writes straight from the caller's memory: 8 MiB each (as the benchmark's plain-write ceiling),
// for tensors of at least 1 MiB (below that, waiting for the write costs more than the copy).
constexpr size_t kDirectChunk = 8 << 20;
constexpr size_t kDirectMin = 1 << 20;
constexpr int64_t kMaxHeader = 100 << 20;

int dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

}  // namespace

int64_t safetensors_writer_bytes() { return 2 * (int64_t)kBounce; }

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

// Stops the io thread: the write in progress finishes, queued ones are dropped (finish() waits for
// every write before it stops; a writer abandoned after an error has nothing worth writing).
void SafetensorsWriter::stop_io() {
  if (!io_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(io_mu_);
    io_stop_ = true;
  }
  io_cv_.notify_all();
  io_.join();
}

void SafetensorsWriter::close_file() {
  stop_io();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status SafetensorsWriter::open(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  close_file();
  path_ = path;
  tensors_ = tensors;
  next_ = 0;
  pos_ = flushed_ = direct_bytes_ = 0;
  run_mem_ = nullptr;
  run_file_ = run_len_ = run_sent_ = 0;
  run_job_ = 0;
  fill_ = 0;
  cur_ = 0;
  bounce_job_[0] = bounce_job_[1] = 0;
  file_crc_ = 0;
  io_queue_.clear();
  io_submitted_ = io_done_ = 0;
  io_stop_ = false;
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
  js.append((kAlign - (8 + js.size()) % kAlign) % kAlign, ' ');  // data starts 4 KiB aligned
  int64_t data_start = 8 + static_cast<int64_t>(js.size());
  for (auto& t : tensors_) t.begin += data_start, t.end += data_start;

  for (char*& b : bounce_) {
    if (b) continue;
    // 2 MiB aligned, in transparent huge pages where the system gives them: O_DIRECT pins every
    // page of every write, and 4 KiB pages made writes ~30% slower on the benchmark VM
    if (!(b = static_cast<char*>(std::aligned_alloc(kHugePage, kBounce))))
      return Status::error(fmt::format("{}: cannot allocate {} MiB of write buffers", path, 2 * kBounce >> 20));
    ::madvise(b, kBounce, MADV_HUGEPAGE);
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::error(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
  io_ = std::thread([this] { io_loop(); });
  uint64_t n = js.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(n >> (8 * i));
  if (Status s = copy_in(len, 8, nullptr); !s) return s;
  return copy_in(js.data(), static_cast<int64_t>(js.size()), nullptr);
}

void SafetensorsWriter::io_loop() {
  std::unique_lock<std::mutex> lk(io_mu_);
  for (;;) {
    io_cv_.wait(lk, [&] { return io_stop_ || !io_queue_.empty(); });
    if (io_stop_) {
      io_done_ += io_queue_.size();
      io_queue_.clear();
      io_cv_.notify_all();
      return;
    }
    IoJob j = io_queue_.front();
    io_queue_.pop_front();
    bool failed = !io_status_;
    lk.unlock();
    Status s;
    size_t done = 0;
    while (!failed && done < j.len) {
      ssize_t w = ::pwrite(fd_, j.buf + done, j.len - done, j.off + static_cast<int64_t>(done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EINVAL && direct_) {  // the filesystem refused O_DIRECT after all
        ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT);
        direct_ = false;
        continue;
      }
      if (w <= 0) {
        s = Status::error(fmt::format("{}: write failed at byte {}: {}", path_, j.off + static_cast<int64_t>(done),
                                      w < 0 ? std::strerror(errno) : "wrote nothing"));
        break;
      }
      done += static_cast<size_t>(w);
    }
    lk.lock();
    if (!s && io_status_) io_status_ = s;
    ++io_done_;
    io_cv_.notify_all();
  }
}

uint64_t SafetensorsWriter::submit_io(const char* buf, size_t len, int64_t off) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lk(io_mu_);
    io_queue_.push_back({buf, len, off});
    id = ++io_submitted_;
  }
  io_cv_.notify_all();
  return id;
}

Status SafetensorsWriter::wait_io(uint64_t job) {
  std::unique_lock<std::mutex> lk(io_mu_);
  io_cv_.wait(lk, [&] { return io_done_ >= job; });
  return io_status_;
}

// Copies into the current write buffer, CRC32C in the same pass; the tensor's and the file's
// running CRCs are extended by combining.
Status SafetensorsWriter::copy_in(const char* p, int64_t n, uint32_t* tensor_crc, bool crc_known) {
  while (n > 0) {
    size_t c = std::min(static_cast<size_t>(n), kBounce - fill_);
    if (crc_known) {  // write_next accounts for the whole tensor
      std::memcpy(bounce_[cur_] + fill_, p, c);
    } else {
      uint32_t cc = crc32c_copy(0, bounce_[cur_] + fill_, p, c);
      if (tensor_crc) *tensor_crc = crc32c_combine(*tensor_crc, cc, c);
      file_crc_ = crc32c_combine(file_crc_, cc, c);
    }
    fill_ += c;
    p += c;
    n -= static_cast<int64_t>(c);
    pos_ += static_cast<int64_t>(c);
    if (fill_ == kBounce)
      if (Status s = flush(false); !s) return s;
  }
  return Status::ok();
}

// A stream of O_DIRECT writes straight from the caller's memory, which mirrors the file from
// run_file_ on: the run's first byte is 4 KiB aligned in memory and in the file. Chunks go to the io
// thread as they fill; end_run() writes what is left of the aligned part and moves the unaligned
// tail into the (empty) write buffer.
Status SafetensorsWriter::write_bytes(const char* p, int64_t n, uint32_t* tensor_crc, bool stable, bool crc_known) {
  const bool extends = run_mem_ && p == run_mem_ + run_len_;  // a run continues only in stable memory
  if (!extends) {
    if (Status s = end_run(); !s) return s;
    uintptr_t skew = (reinterpret_cast<uintptr_t>(p) - static_cast<uintptr_t>(pos_)) % kAlign;
    int64_t min = stable ? static_cast<int64_t>(2 * kAlign) : static_cast<int64_t>(kDirectMin);
    if (!direct_ || skew != 0 || n < min) return copy_in(p, n, tensor_crc, crc_known);
    // p + head and file offset pos_ + head are both 4 KiB aligned: buffer the head, flush the
    // buffer (an aligned length, ending at pos_), start the run there.
    int64_t head = (static_cast<int64_t>(kAlign) - pos_ % static_cast<int64_t>(kAlign)) % static_cast<int64_t>(kAlign);
    if (Status s = copy_in(p, head, tensor_crc, crc_known); !s) return s;
    if (Status s = flush(false); !s) return s;
    p += head;
    n -= head;
    run_mem_ = p;
    run_file_ = pos_;
    run_len_ = run_sent_ = 0;
  }
  run_len_ += n;
  pos_ += n;
  while (run_len_ - run_sent_ >= static_cast<int64_t>(kDirectChunk)) {
    run_job_ = submit_io(run_mem_ + run_sent_, kDirectChunk, run_file_ + run_sent_);
    run_sent_ += static_cast<int64_t>(kDirectChunk);
  }
  if (!crc_known) {
    uint32_t cc = crc32c_update(0, p, static_cast<size_t>(n));  // while the io thread writes
    if (tensor_crc) *tensor_crc = crc32c_combine(*tensor_crc, cc, static_cast<uint64_t>(n));
    file_crc_ = crc32c_combine(file_crc_, cc, static_cast<uint64_t>(n));
  }
  if (stable) return Status::ok();  // the run may continue with the next tensor
  Status s = end_run();
  Status w = wait_io(run_job_);  // the caller may reuse its memory once we return
  return !s ? s : w;
}

Status SafetensorsWriter::end_run() {
  if (!run_mem_) return Status::ok();
  int64_t aligned = run_len_ / static_cast<int64_t>(kAlign) * static_cast<int64_t>(kAlign);
  if (aligned > run_sent_) run_job_ = submit_io(run_mem_ + run_sent_, static_cast<size_t>(aligned - run_sent_), run_file_ + run_sent_);
  direct_bytes_ += aligned;
  // the write buffer was flushed when the run started: the tail becomes its first bytes (counted
  // in pos_ and the CRCs already)
  std::memcpy(bounce_[cur_], run_mem_ + aligned, static_cast<size_t>(run_len_ - aligned));
  fill_ = static_cast<size_t>(run_len_ - aligned);
  flushed_ = run_file_ + aligned;
  run_mem_ = nullptr;
  run_len_ = run_sent_ = 0;
  return Status::ok();
}

// Hands the current write buffer to the io thread and switches to the other one once the io
// thread is done with it. The last, partial buffer is zero-padded to the O_DIRECT alignment;
// finish() truncates the file back to its size.
Status SafetensorsWriter::flush(bool last) {
  if (fill_ > 0) {
    size_t len = fill_;
    if (last && direct_ && len % kAlign) {
      size_t padded = (len + kAlign - 1) / kAlign * kAlign;
      std::memset(bounce_[cur_] + len, 0, padded - len);
      len = padded;
    }
    bounce_job_[cur_] = submit_io(bounce_[cur_], len, flushed_);
    flushed_ += static_cast<int64_t>(fill_);
    fill_ = 0;
    cur_ ^= 1;
  }
  return wait_io(bounce_job_[cur_]);  // the buffer about to fill is no longer being written
}

namespace {
thread_local SafetensorsStableMemory* t_stable = nullptr;
}  // namespace

SafetensorsStableMemory::SafetensorsStableMemory(const void* begin, int64_t bytes)
    : begin_(static_cast<const char*>(begin)), end_(static_cast<const char*>(begin) + bytes), prev_(t_stable) {
  t_stable = this;
}

SafetensorsStableMemory::~SafetensorsStableMemory() { t_stable = prev_; }

void SafetensorsStableMemory::add_crc(const void* p, int64_t bytes, uint32_t crc) {
  const char* c = static_cast<const char*>(p);
  if (contains(c, bytes)) crcs_[c] = {bytes, crc};
}

const uint32_t* SafetensorsStableMemory::find_crc(const char* p, int64_t bytes) const {
  auto it = crcs_.find(p);
  return it != crcs_.end() && it->second.first == bytes ? &it->second.second : nullptr;
}

const SafetensorsStableMemory* SafetensorsStableMemory::current() { return t_stable; }

Status SafetensorsWriter::write_next(const float* data) {
  if (fd_ < 0) return Status::error(fmt::format("{}: not open", path_));
  if (next_ >= tensors_.size()) return Status::error(fmt::format("{}: every tensor is already written", path_));
  SafetensorsTensor& t = tensors_[next_++];
  const char* p = reinterpret_cast<const char*>(data);
  const int64_t n = t.bytes();
  const SafetensorsStableMemory* st = SafetensorsStableMemory::current();
  const bool stable = st && st->contains(p, n);
  const uint32_t* known = stable ? st->find_crc(p, n) : nullptr;
  t.crc32c = 0;
  Status s = write_bytes(p, n, &t.crc32c, stable, known != nullptr);
  if (known) {
    t.crc32c = *known;
    file_crc_ = crc32c_combine(file_crc_, *known, static_cast<uint64_t>(n));
  }
  return s;
}

Status SafetensorsWriter::finish() {
  if (fd_ < 0) return Status::error(fmt::format("{}: not open", path_));
  if (next_ != tensors_.size())
    return Status::error(fmt::format("{}: {} of {} tensors written", path_, next_, tensors_.size()));
  Status s = end_run();
  if (s) s = flush(true);
  if (s) s = wait_io(io_submitted_);
  if (s && ::ftruncate(fd_, pos_) != 0)  // drop the O_DIRECT padding
    s = Status::error(fmt::format("{}: truncate to {} bytes failed: {}", path_, pos_, std::strerror(errno)));
  if (s && ::fsync(fd_) != 0) s = Status::error(fmt::format("{}: fsync failed: {}", path_, std::strerror(errno)));
  stop_io();  // after a failure, writes still queued are dropped
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
