// GGUF v3, ggml's single-file model format (ggml docs/gguf.md), as bytes: a writer that streams
// one tensor at a time behind a header built in memory, and a reader (mmap) that validates every
// field against the spec. Not the Llama mapping (names, permutation, dtypes: export_gguf.hpp).
//
// Layout (little-endian): "GGUF", u32 version = 3, u64 tensor_count, u64 kv_count; kv_count
// key-value pairs (string key, u32 value type, value; an array is u32 element type, u64 count,
// the elements); tensor_count tensor infos (string name, u32 n_dims, u64 ne[n_dims] innermost
// first, u32 ggml type, u64 offset into the data section, a multiple of the alignment); zero
// padding to `general.alignment` (32 when absent); the data section, each tensor at its offset.
// A string is u64 length + UTF-8 bytes, no terminator.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"

namespace smelt {

enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* gguf_type_name(GgufType t);  // "uint32", "string", "array", ...; "?" outside the spec

// The ggml tensor types Smelt writes and loads (ggml.h numbering; any other is refused by name).
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8, kBf16 = 30 };
// "F32", "F16", "Q8_0", "BF16", or the ggml name of a type Smelt does not load ("Q4_K", ...),
// "type N" past the known list.
std::string ggml_type_name(uint32_t type);
// Bytes of a row of ne0 elements (F16 and BF16: 2 each; Q8_0: ne0 % 32 == 0, 34 bytes per block);
// -1 when not whole.
int64_t ggml_row_bytes(GgmlType t, int64_t ne0);

constexpr uint32_t kGgufVersion = 3;
constexpr uint32_t kGgufDefaultAlignment = 32;
constexpr size_t kGgufMaxName = 63;  // ggml's GGML_MAX_NAME (64) less the terminator

// ---- writer -------------------------------------------------------------------------------------
class GgufWriter {
 public:
  GgufWriter() = default;
  ~GgufWriter();  // closes an unfinished file (the caller removes it)
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Metadata, written in the order added (keys must be unique: the later is an error at open).
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_u64(const std::string& key, uint64_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_strings(const std::string& key, const std::vector<std::string>& v);
  void add_i32s(const std::string& key, const std::vector<int32_t>& v);
  void add_f32s(const std::string& key, const std::vector<float>& v);
  // A tensor whose data will follow, in the order added; ne innermost first (ne[0] = row length).
  void add_tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type);

  // Creates path (truncating), writes the header (adding general.alignment = 32 unless given),
  // the tensor infos with their offsets and the padding. Errors: a duplicate key or tensor, a name
  // over 63 bytes, a shape whose rows do not fill whole Q8_0 blocks.
  Status open(const std::string& path);
  // The next tensor's bytes (exactly its size: ggml_row_bytes * rows), then zero padding to the
  // alignment; the caller may reuse data on return.
  Status write_tensor(const void* data, int64_t bytes);
  // Every tensor written: fsync and close.
  Status finish();

  int64_t file_bytes() const { return pos_; }
  int64_t data_offset() const { return data_offset_; }  // where the data section starts
  uint32_t alignment() const { return alignment_; }

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    int64_t bytes = 0, offset = 0;
  };
  void key(const std::string& k, GgufType t);
  Status write_all(const void* p, size_t n);

  std::string header_;  // the kv pairs, serialized as added
  std::vector<std::string> keys_;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = kGgufDefaultAlignment;
  std::string path_;
  int fd_ = -1;
  size_t next_ = 0;
  int64_t pos_ = 0, data_offset_ = 0;
};

// ---- reader -------------------------------------------------------------------------------------
// One metadata value as read: scalars widened (integers to i/u, floats to f), arrays kept by kind.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  GgufType elem = GgufType::kUint8;  // arrays: the element type
  uint64_t u = 0;                    // unsigned integers and bool
  int64_t i = 0;                     // signed integers
  double f = 0;                      // float32 / float64
  std::string str;
  std::vector<std::string> strs;     // array of string
  std::vector<int64_t> ints;         // array of any integer type or bool
  std::vector<double> floats;        // array of float32 / float64
  uint64_t count = 0;                // array length
  uint64_t offset = 0;               // file offset of the key-value pair (for messages)
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // innermost first
  uint32_t type = 0;        // ggml type number (possibly one Smelt does not load)
  uint64_t offset = 0;      // relative to the data section
  uint64_t file_offset = 0; // absolute
  int64_t bytes = 0;        // -1 for a type Smelt cannot size
  uint64_t info_offset = 0; // file offset of the tensor info (for messages)
  int64_t elements() const;
};

class GgufReader {
 public:
  GgufReader() = default;
  ~GgufReader();
  GgufReader(const GgufReader&) = delete;
  GgufReader& operator=(const GgufReader&) = delete;

  // Maps path and parses the header. Errors name the file, the byte offset and what was expected:
  // magic, version 3, counts that fit the file, known value types, whole strings, tensor dims
  // >= 1, offsets on the alignment and inside the file, tensors not overlapping.
  Status open(const std::string& path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  const std::vector<std::string>& keys() const { return keys_; }  // in file order
  const GgufValue* find(const std::string& key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  const uint8_t* tensor_data(const GgufTensorInfo& t) const { return base_ + t.file_offset; }

  // Typed look-ups; a missing key (when required) or a wrong type is an error naming the file,
  // the key, its offset and the type expected. Absent and not required: ok, out untouched.
  Status get_u32(const std::string& key, uint32_t& out, bool required = true) const;  // any unsigned/signed int >= 0
  Status get_f32(const std::string& key, float& out, bool required = true) const;     // float32 (or float64)
  Status get_bool(const std::string& key, bool& out, bool required = true) const;
  Status get_string(const std::string& key, std::string& out, bool required = true) const;
  Status get_strings(const std::string& key, const std::vector<std::string>*& out) const;
  Status get_ints(const std::string& key, const std::vector<int64_t>*& out) const;

 private:
  Status fail(uint64_t offset, const std::string& what) const;
  Status wrong_type(const std::string& key, const GgufValue& v, const char* want) const;

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0, alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::string> keys_;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace smelt
