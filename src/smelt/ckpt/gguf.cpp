// GGUF v3 bytes (gguf.hpp): the writer serializes the header in memory (metadata and tensor infos
// are small next to the weights) and then streams each tensor with its padding; the reader maps
// the file and checks every length against the bytes that remain before reading it, so a
// truncated or hostile file fails with the offset instead of reading past the end.
#include "smelt/ckpt/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace smelt {

const char* gguf_type_name(GgufType t) {
  static const char* const kNames[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                       "bool", "string", "array", "uint64", "int64", "float64"};
  uint32_t i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "?";
}

std::string ggml_type_name(uint32_t type) {
  // ggml.h's enum ggml_type; "" marks numbers ggml has retired.
  static const char* const kNames[] = {
      "F32",   "F16",    "Q4_0",    "Q4_1",   "",       "",      "Q5_0",    "Q5_1", "Q8_0",  "Q8_1",
      "Q2_K",  "Q3_K",   "Q4_K",    "Q5_K",   "Q6_K",   "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL", "IQ3_S", "IQ2_S",   "IQ4_XS", "I8",     "I16",   "I32",     "I64",  "F64",   "IQ1_M",
      "BF16",  "",       "",        "",       "TQ1_0",  "TQ2_0", "",        "",     "",      "MXFP4"};
  if (type < sizeof kNames / sizeof kNames[0] && kNames[type][0]) return kNames[type];
  return fmt::format("type {}", type);
}

int64_t ggml_row_bytes(GgmlType t, int64_t ne0) {
  switch (t) {
    case GgmlType::kF32: return 4 * ne0;
    case GgmlType::kF16:
    case GgmlType::kBf16: return 2 * ne0;
    case GgmlType::kQ8_0: return ne0 % 32 == 0 ? ne0 / 32 * 34 : -1;
  }
  return -1;
}

namespace {
uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

template <class T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);  // little-endian: x86 and arm64 hosts
}
void put_str(std::string& s, const std::string& v) {
  put<uint64_t>(s, v.size());
  s += v;
}
}  // namespace

// ---- writer -------------------------------------------------------------------------------------

GgufWriter::~GgufWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void GgufWriter::key(const std::string& k, GgufType t) {
  keys_.push_back(k);
  put_str(header_, k);
  put<uint32_t>(header_, static_cast<uint32_t>(t));
}

void GgufWriter::add_u32(const std::string& k, uint32_t v) {
  key(k, GgufType::kUint32);
  put(header_, v);
  if (k == "general.alignment") alignment_ = v;
}
void GgufWriter::add_i32(const std::string& k, int32_t v) {
  key(k, GgufType::kInt32);
  put(header_, v);
}
void GgufWriter::add_u64(const std::string& k, uint64_t v) {
  key(k, GgufType::kUint64);
  put(header_, v);
}
void GgufWriter::add_f32(const std::string& k, float v) {
  key(k, GgufType::kFloat32);
  put(header_, v);
}
void GgufWriter::add_bool(const std::string& k, bool v) {
  key(k, GgufType::kBool);
  put<uint8_t>(header_, v ? 1 : 0);
}
void GgufWriter::add_string(const std::string& k, const std::string& v) {
  key(k, GgufType::kString);
  put_str(header_, v);
}
void GgufWriter::add_strings(const std::string& k, const std::vector<std::string>& v) {
  key(k, GgufType::kArray);
  put<uint32_t>(header_, static_cast<uint32_t>(GgufType::kString));
  put<uint64_t>(header_, v.size());
  for (const auto& s : v) put_str(header_, s);
}
void GgufWriter::add_i32s(const std::string& k, const std::vector<int32_t>& v) {
  key(k, GgufType::kArray);
  put<uint32_t>(header_, static_cast<uint32_t>(GgufType::kInt32));
  put<uint64_t>(header_, v.size());
  header_.append(reinterpret_cast<const char*>(v.data()), 4 * v.size());
}
void GgufWriter::add_f32s(const std::string& k, const std::vector<float>& v) {
  key(k, GgufType::kArray);
  put<uint32_t>(header_, static_cast<uint32_t>(GgufType::kFloat32));
  put<uint64_t>(header_, v.size());
  header_.append(reinterpret_cast<const char*>(v.data()), 4 * v.size());
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type) {
  Tensor t{name, ne, type};
  int64_t rows = 1;
  for (size_t d = 1; d < ne.size(); d++) rows *= ne[d];
  int64_t rb = ne.empty() ? -1 : ggml_row_bytes(type, ne[0]);
  t.bytes = rb < 0 ? -1 : rb * rows;
  tensors_.push_back(std::move(t));
}

Status GgufWriter::write_all(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd_, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Status::error(fmt::format("{}: write at byte {} failed: {}", path_, pos_, std::strerror(errno)));
    c += w;
    n -= (size_t)w;
    pos_ += w;
  }
  return Status::ok();
}

Status GgufWriter::open(const std::string& path) {
  path_ = path;
  bool has_alignment = false;
  for (size_t i = 0; i < keys_.size(); i++) {
    has_alignment |= keys_[i] == "general.alignment";
    for (size_t j = 0; j < i; j++)
      if (keys_[j] == keys_[i]) return Status::error(fmt::format("{}: metadata key {} added twice", path, keys_[i]));
  }
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)))
    return Status::error(fmt::format("{}: general.alignment {} is not a power of two", path, alignment_));
  if (!has_alignment) add_u32("general.alignment", alignment_);
  std::string h;
  h.append("GGUF", 4);
  put<uint32_t>(h, kGgufVersion);
  put<uint64_t>(h, tensors_.size());
  put<uint64_t>(h, keys_.size());
  h += header_;
  int64_t off = 0;
  for (size_t i = 0; i < tensors_.size(); i++) {
    Tensor& t = tensors_[i];
    if (t.name.empty() || t.name.size() > kGgufMaxName)
      return Status::error(fmt::format("{}: tensor name '{}' must have 1..{} bytes", path, t.name, kGgufMaxName));
    for (size_t j = 0; j < i; j++)
      if (tensors_[j].name == t.name) return Status::error(fmt::format("{}: tensor {} added twice", path, t.name));
    if (t.ne.empty() || t.ne.size() > 4)
      return Status::error(fmt::format("{}: tensor {} has {} dimensions (GGUF: 1..4)", path, t.name, t.ne.size()));
    for (int64_t d : t.ne)
      if (d < 1) return Status::error(fmt::format("{}: tensor {} has a dimension {}", path, t.name, d));
    if (t.bytes < 0)
      return Status::error(fmt::format("{}: tensor {}: a row of {} values is not whole {} blocks", path, t.name,
                                       t.ne[0], ggml_type_name((uint32_t)t.type)));
    t.offset = off;
    off = (int64_t)align_up(off + t.bytes, alignment_);
    put_str(h, t.name);
    put<uint32_t>(h, (uint32_t)t.ne.size());
    for (int64_t d : t.ne) put<uint64_t>(h, (uint64_t)d);
    put<uint32_t>(h, (uint32_t)t.type);
    put<uint64_t>(h, (uint64_t)t.offset);
  }
  data_offset_ = (int64_t)align_up(h.size(), alignment_);
  h.resize((size_t)data_offset_, '\0');
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::error(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
  pos_ = 0;
  next_ = 0;
  return write_all(h.data(), h.size());
}

Status GgufWriter::write_tensor(const void* data, int64_t bytes) {
  if (fd_ < 0) return Status::error(fmt::format("{}: write_tensor before open", path_));
  if (next_ >= tensors_.size())
    return Status::error(fmt::format("{}: more tensors written than the {} declared", path_, tensors_.size()));
  const Tensor& t = tensors_[next_];
  if (bytes != t.bytes)
    return Status::error(fmt::format("{}: tensor {} given {} bytes, its shape and type need {}", path_, t.name,
                                     bytes, t.bytes));
  if (pos_ != data_offset_ + t.offset)
    return Status::error(fmt::format("{}: tensor {} would start at byte {}, its info says {}", path_, t.name, pos_,
                                     data_offset_ + t.offset));
  if (Status s = write_all(data, (size_t)bytes); !s) return s;
  static const char kZeros[256] = {};
  size_t pad = (size_t)(align_up((uint64_t)bytes, alignment_) - (uint64_t)bytes);
  while (pad > 0) {
    size_t n = std::min(pad, sizeof kZeros);
    if (Status s = write_all(kZeros, n); !s) return s;
    pad -= n;
  }
  next_++;
  return Status::ok();
}

Status GgufWriter::finish() {
  if (fd_ < 0) return Status::error(fmt::format("{}: finish before open", path_));
  if (next_ != tensors_.size())
    return Status::error(fmt::format("{}: {} of {} tensors written", path_, next_, tensors_.size()));
  if (::fsync(fd_) != 0) return Status::error(fmt::format("{}: fsync failed: {}", path_, std::strerror(errno)));
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return Status::error(fmt::format("{}: close failed: {}", path_, std::strerror(errno)));
  return Status::ok();
}

// ---- reader -------------------------------------------------------------------------------------

int64_t GgufTensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

GgufReader::~GgufReader() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

Status GgufReader::fail(uint64_t offset, const std::string& what) const {
  return Status::error(fmt::format("{}: byte {}: {}", path_, offset, what));
}

namespace {
// A bounds-checked cursor over the mapped file.
struct Cursor {
  const uint8_t* base;
  uint64_t size, pos;
  bool has(uint64_t n) const { return n <= size - pos; }
  template <class T>
  bool get(T& v) {
    if (!has(sizeof v)) return false;
    std::memcpy(&v, base + pos, sizeof v);
    pos += sizeof v;
    return true;
  }
};
}  // namespace

Status GgufReader::open(const std::string& path) {
  path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Status::error(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)));
  }
  size_ = (uint64_t)st.st_size;
  if (size_ < 24) {
    ::close(fd);
    return Status::error(fmt::format("{}: {} bytes; a GGUF file starts with a 24-byte header", path, size_));
  }
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return Status::error(fmt::format("{}: cannot map: {}", path, std::strerror(errno)));
  base_ = static_cast<const uint8_t*>(p);

  Cursor c{base_, size_, 0};
  if (std::memcmp(base_, "GGUF", 4) != 0)
    return fail(0, fmt::format("magic is {:02x} {:02x} {:02x} {:02x}, expected \"GGUF\" (47 47 55 46)", base_[0],
                               base_[1], base_[2], base_[3]));
  c.pos = 4;
  c.get(version_);
  if (version_ != kGgufVersion)
    return fail(4, fmt::format("version {}, expected 3 (GGUF v3; v1/v2 files predate it, big-endian files read "
                               "as a huge number)", version_));
  uint64_t n_tensors = 0, n_kv = 0;
  c.get(n_tensors);
  c.get(n_kv);
  // Each kv takes at least 8 + 4 + 1 bytes and each tensor info 8 + 4 + 8 + 4 + 8, so counts that
  // cannot fit the file are refused before anything is reserved.
  if (n_kv > size_ / 13) return fail(16, fmt::format("metadata_kv_count {} cannot fit a {}-byte file", n_kv, size_));
  if (n_tensors > size_ / 32) return fail(8, fmt::format("tensor_count {} cannot fit a {}-byte file", n_tensors, size_));

  auto read_str = [&](std::string& out, const char* what) -> Status {
    uint64_t at = c.pos, n = 0;
    if (!c.get(n)) return fail(at, fmt::format("{}: the file ends inside a string length", what));
    if (!c.has(n)) return fail(at, fmt::format("{}: a string of {} bytes runs past the end of the file", what, n));
    out.assign(reinterpret_cast<const char*>(base_ + c.pos), n);
    c.pos += n;
    return Status::ok();
  };
  auto scalar_size = [](GgufType t) -> int {
    switch (t) {
      case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
      case GgufType::kUint16: case GgufType::kInt16: return 2;
      case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
      case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
      default: return 0;
    }
  };
  // One scalar of type t at the cursor into v (u, i or f; bool into u).
  auto read_scalar = [&](GgufType t, GgufValue& v) {
    auto take = [&](auto x) { c.get(x); return x; };
    switch (t) {
      case GgufType::kUint8: v.u = take(uint8_t{}); break;
      case GgufType::kBool: v.u = take(uint8_t{}); break;
      case GgufType::kInt8: v.i = take(int8_t{}); break;
      case GgufType::kUint16: v.u = take(uint16_t{}); break;
      case GgufType::kInt16: v.i = take(int16_t{}); break;
      case GgufType::kUint32: v.u = take(uint32_t{}); break;
      case GgufType::kInt32: v.i = take(int32_t{}); break;
      case GgufType::kFloat32: v.f = take(float{}); break;
      case GgufType::kUint64: v.u = take(uint64_t{}); break;
      case GgufType::kInt64: v.i = take(int64_t{}); break;
      case GgufType::kFloat64: v.f = take(double{}); break;
      default: break;
    }
  };

  for (uint64_t k = 0; k < n_kv; k++) {
    GgufValue v;
    v.offset = c.pos;
    std::string key;
    if (Status s = read_str(key, fmt::format("metadata key {}", k).c_str()); !s) return s;
    if (kv_.count(key)) return fail(v.offset, fmt::format("metadata key {} appears twice", key));
    uint32_t type = 0;
    if (!c.get(type)) return fail(c.pos, fmt::format("{}: the file ends before its value type", key));
    if (type > 12) return fail(c.pos - 4, fmt::format("{}: value type {}, expected 0..12", key, type));
    v.type = static_cast<GgufType>(type);
    if (v.type == GgufType::kString) {
      if (Status s = read_str(v.str, key.c_str()); !s) return s;
    } else if (v.type == GgufType::kArray) {
      uint32_t et = 0;
      uint64_t at = c.pos;
      if (!c.get(et) || !c.get(v.count)) return fail(at, fmt::format("{}: the file ends inside an array header", key));
      if (et > 12 || et == (uint32_t)GgufType::kArray)
        return fail(at, fmt::format("{}: array element type {}, expected 0..12 other than 9 (no nested arrays)", key, et));
      v.elem = static_cast<GgufType>(et);
      if (v.elem == GgufType::kString) {
        if (v.count > (size_ - c.pos) / 8)
          return fail(at, fmt::format("{}: {} strings cannot fit the rest of the file", key, v.count));
        v.strs.resize(v.count);
        for (uint64_t j = 0; j < v.count; j++)
          if (Status s = read_str(v.strs[j], fmt::format("{}[{}]", key, j).c_str()); !s) return s;
      } else {
        int sz = scalar_size(v.elem);
        if (v.count > (size_ - c.pos) / sz)
          return fail(at, fmt::format("{}: {} x {} bytes run past the end of the file", key, v.count, sz));
        bool fl = v.elem == GgufType::kFloat32 || v.elem == GgufType::kFloat64;
        if (fl) v.floats.reserve(v.count);
        else v.ints.reserve(v.count);
        for (uint64_t j = 0; j < v.count; j++) {
          GgufValue e;
          read_scalar(v.elem, e);
          if (fl) v.floats.push_back(e.f);
          else v.ints.push_back(e.i != 0 ? e.i : (int64_t)e.u);
        }
      }
    } else {
      if (!c.has(scalar_size(v.type))) return fail(c.pos, fmt::format("{}: the file ends inside its value", key));
      if (v.type == GgufType::kBool && base_[c.pos] > 1)
        return fail(c.pos, fmt::format("{}: bool byte {}, expected 0 or 1", key, base_[c.pos]));
      read_scalar(v.type, v);
    }
    keys_.push_back(key);
    kv_.emplace(std::move(key), std::move(v));
  }
  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::kUint32) return wrong_type("general.alignment", *a, "uint32");
    if (a->u == 0 || (a->u & (a->u - 1)))
      return fail(a->offset, fmt::format("general.alignment {} is not a power of two", a->u));
    alignment_ = (uint32_t)a->u;
  }

  for (uint64_t k = 0; k < n_tensors; k++) {
    GgufTensorInfo t;
    t.info_offset = c.pos;
    if (Status s = read_str(t.name, fmt::format("tensor info {}", k).c_str()); !s) return s;
    if (t.name.empty() || t.name.size() > kGgufMaxName)
      return fail(t.info_offset, fmt::format("tensor name '{}' has {} bytes, expected 1..{}", t.name, t.name.size(),
                                             kGgufMaxName));
    if (tensor_index_.count(t.name)) return fail(t.info_offset, fmt::format("tensor {} appears twice", t.name));
    uint32_t nd = 0;
    if (!c.get(nd)) return fail(c.pos, fmt::format("tensor {}: the file ends before n_dims", t.name));
    if (nd < 1 || nd > 4) return fail(c.pos - 4, fmt::format("tensor {}: n_dims {}, expected 1..4", t.name, nd));
    int64_t elements = 1;
    for (uint32_t d = 0; d < nd; d++) {
      uint64_t x = 0;
      if (!c.get(x)) return fail(c.pos, fmt::format("tensor {}: the file ends inside its dimensions", t.name));
      if (x < 1 || x > (uint64_t)INT64_MAX / (uint64_t)elements)
        return fail(c.pos - 8, fmt::format("tensor {}: dimension {} is {}, expected >= 1 with a product that fits "
                                           "int64", t.name, d, x));
      elements *= (int64_t)x;
      t.ne.push_back((int64_t)x);
    }
    if (!c.get(t.type) || !c.get(t.offset))
      return fail(c.pos, fmt::format("tensor {}: the file ends before its type and offset", t.name));
    if (t.offset % alignment_ != 0)
      return fail(c.pos - 8, fmt::format("tensor {}: offset {} is not a multiple of the alignment {}", t.name,
                                         t.offset, alignment_));
    if (t.type == 0 || t.type == 1 || t.type == 8 || t.type == 30) {
      int64_t rb = ggml_row_bytes(static_cast<GgmlType>(t.type), t.ne[0]);
      if (rb < 0)
        return fail(c.pos - 12, fmt::format("tensor {}: a row of {} values is not whole {} blocks of 32", t.name,
                                            t.ne[0], ggml_type_name(t.type)));
      t.bytes = rb * (elements / t.ne[0]);
    } else {
      t.bytes = -1;
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
  data_offset_ = align_up(c.pos, alignment_);
  if (data_offset_ > size_)
    return fail(c.pos, fmt::format("the header ends at {}; the data section would start at {}, past the end of the "
                                   "{}-byte file", c.pos, data_offset_, size_));
  // ggml's reader wants each tensor exactly at the end of the previous one, padded to the
  // alignment; the same check here also rules out overlaps and data past the end.
  uint64_t expect = 0;
  bool sized = true;
  for (auto& t : tensors_) {
    t.file_offset = data_offset_ + t.offset;
    if (sized && t.offset != expect)
      return fail(t.info_offset, fmt::format("tensor {}: offset {}, expected {} (the previous tensor's end padded to "
                                             "{})", t.name, t.offset, expect, alignment_));
    if (t.bytes < 0) {
      sized = false;
      continue;
    }
    if (t.offset > size_ - data_offset_ || (uint64_t)t.bytes > size_ - t.file_offset)
      return fail(t.info_offset, fmt::format("tensor {}: {} bytes at file offset {} run past the end of the {}-byte "
                                             "file", t.name, t.bytes, t.file_offset, size_));
    expect = align_up(t.offset + (uint64_t)t.bytes, alignment_);
  }
  return Status::ok();
}

const GgufValue* GgufReader::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufReader::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Status GgufReader::wrong_type(const std::string& key, const GgufValue& v, const char* want) const {
  std::string got = gguf_type_name(v.type);
  if (v.type == GgufType::kArray) got = fmt::format("array of {}", gguf_type_name(v.elem));
  return fail(v.offset, fmt::format("{} is {}, expected {}", key, got, want));
}

Status GgufReader::get_u32(const std::string& key, uint32_t& out, bool required) const {
  const GgufValue* v = find(key);
  if (!v) return required ? Status::error(fmt::format("{}: no metadata key {} (uint32)", path_, key)) : Status::ok();
  uint64_t x;
  switch (v->type) {
    case GgufType::kUint8: case GgufType::kUint16: case GgufType::kUint32: case GgufType::kUint64: x = v->u; break;
    case GgufType::kInt8: case GgufType::kInt16: case GgufType::kInt32: case GgufType::kInt64:
      if (v->i < 0) return fail(v->offset, fmt::format("{} is {}, expected a count >= 0", key, v->i));
      x = (uint64_t)v->i;
      break;
    default: return wrong_type(key, *v, "uint32");
  }
  if (x > UINT32_MAX) return fail(v->offset, fmt::format("{} is {}, more than uint32 holds", key, x));
  out = (uint32_t)x;
  return Status::ok();
}

Status GgufReader::get_f32(const std::string& key, float& out, bool required) const {
  const GgufValue* v = find(key);
  if (!v) return required ? Status::error(fmt::format("{}: no metadata key {} (float32)", path_, key)) : Status::ok();
  if (v->type != GgufType::kFloat32 && v->type != GgufType::kFloat64) return wrong_type(key, *v, "float32");
  out = (float)v->f;
  return Status::ok();
}

Status GgufReader::get_bool(const std::string& key, bool& out, bool required) const {
  const GgufValue* v = find(key);
  if (!v) return required ? Status::error(fmt::format("{}: no metadata key {} (bool)", path_, key)) : Status::ok();
  if (v->type != GgufType::kBool) return wrong_type(key, *v, "bool");
  out = v->u != 0;
  return Status::ok();
}

Status GgufReader::get_string(const std::string& key, std::string& out, bool required) const {
  const GgufValue* v = find(key);
  if (!v) return required ? Status::error(fmt::format("{}: no metadata key {} (string)", path_, key)) : Status::ok();
  if (v->type != GgufType::kString) return wrong_type(key, *v, "string");
  out = v->str;
  return Status::ok();
}

Status GgufReader::get_strings(const std::string& key, const std::vector<std::string>*& out) const {
  const GgufValue* v = find(key);
  if (!v) return Status::error(fmt::format("{}: no metadata key {} (array of string)", path_, key));
  if (v->type != GgufType::kArray || v->elem != GgufType::kString) return wrong_type(key, *v, "array of string");
  out = &v->strs;
  return Status::ok();
}

Status GgufReader::get_ints(const std::string& key, const std::vector<int64_t>*& out) const {
  const GgufValue* v = find(key);
  if (!v) return Status::error(fmt::format("{}: no metadata key {} (array of int32)", path_, key));
  if (v->type != GgufType::kArray || !v->floats.empty() || v->elem == GgufType::kString ||
      v->elem == GgufType::kFloat32 || v->elem == GgufType::kFloat64)
    return wrong_type(key, *v, "array of int32");
  out = &v->ints;
  return Status::ok();
}

}  // namespace smelt
