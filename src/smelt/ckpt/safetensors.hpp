// safetensors files (https://github.com/huggingface/safetensors, "Format"): 8-byte little-endian
// header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {string: string}} padded with spaces so the data starts 4 KiB aligned, then the data. The writer
// streams one tensor at a time, with O_DIRECT where the filesystem allows it, computing CRC32Cs on
// the way; the reader checks the header against the file. Not the checkpoint layout
// (checkpoint.cpp) and not export.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "smelt/common/status.hpp"

namespace smelt {

struct SafetensorsTensor {
  std::string name;
  std::string dtype = "F32";   // the writer writes F32 only; the reader accepts every spec dtype
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // absolute byte offsets of the data in the file
  uint32_t crc32c = 0;         // writer: CRC32C of the data bytes (the reader leaves 0)
  int64_t bytes() const { return end - begin; }
};

// Product of the dimensions (1 for a scalar); -1 when a dimension is negative or it overflows.
int64_t safetensors_numel(const std::vector<int64_t>& shape);

// The memory a SafetensorsWriter holds while it writes: its two write buffers (a run's memory plan
// counts them for the checkpoint writer).
int64_t safetensors_writer_bytes();

class SafetensorsWriter {
 public:
  SafetensorsWriter() = default;
  ~SafetensorsWriter();  // closes the file if open (a partial file is left for the caller to remove)
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Creates PATH (truncating) and writes the header; tensors need name and shape (F32, row-major),
  // in the order their data will follow. The data starts at a multiple of 4 KiB (the header is
  // padded with spaces), so consecutive tensors of a 4 KiB-aligned buffer laid out like the file
  // are written straight from it (see write_next).
  Status open(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
              const std::map<std::string, std::string>& metadata);
  // Writes the data of the next tensor: numel floats (little-endian, as in memory on x86); the
  // caller may reuse `data` when it returns (unless it lies in this thread's
  // SafetensorsStableMemory). Two paths, the same bytes and CRCs:
  //  - data's address and the tensor's file offset agree modulo 4 KiB (a staging buffer laid out as
  //    the file image, e.g. CkptWriter's), the tensor has at least 1 MiB and the file is O_DIRECT:
  //    the 4 KiB-aligned middle is written with O_DIRECT straight from data, in 8 MiB writes, while
  //    this thread computes its CRC32C; only the unaligned ends go through the write buffers. In
  //    stable memory, consecutive tensors (each starting where the previous one ended) form one
  //    stream of 8 MiB writes, whatever their sizes, and write_next does not wait for them; a
  //    CRC32C the memory's guard knows is taken instead of computed.
  //  - otherwise: copied into one of two aligned 4 MiB write buffers with the CRC32C computed in
  //    the same pass (crc32c_copy); the io thread writes one buffer while the other fills.
  Status write_next(const float* data);
  // Every tensor written: fsync and close.
  Status finish();

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // offsets and CRCs
  uint32_t file_crc32c() const { return file_crc_; }                         // of the whole file
  int64_t file_bytes() const { return pos_; }
  int64_t direct_bytes() const { return direct_bytes_; }  // of file_bytes(), written without a copy

 private:
  struct IoJob {  // one pwrite of [buf, buf + len) at file offset off
    const char* buf;
    size_t len;
    int64_t off;
  };
  Status write_bytes(const char* p, int64_t n, uint32_t* tensor_crc, bool stable, bool crc_known);
  Status end_run();
  Status copy_in(const char* p, int64_t n, uint32_t* tensor_crc, bool crc_known = false);
  Status flush(bool last);
  uint64_t submit_io(const char* buf, size_t len, int64_t off);
  Status wait_io(uint64_t job);  // until jobs 1..job are written; the first write error, if any
  void io_loop();
  void stop_io();
  void close_file();
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> direct_{false};  // O_DIRECT: the filesystem took it (tmpfs and some others do not)
  std::vector<SafetensorsTensor> tensors_;
  size_t next_ = 0;
  int64_t pos_ = 0;      // bytes accepted
  int64_t flushed_ = 0;  // file offset of the current write buffer's first byte
  int64_t direct_bytes_ = 0;
  uint32_t file_crc_ = 0;
  // The current run of direct writes (write_bytes): memory start, file offset, bytes taken, bytes
  // handed to the io thread, its last job.
  const char* run_mem_ = nullptr;
  int64_t run_file_ = 0, run_len_ = 0, run_sent_ = 0;
  uint64_t run_job_ = 0;
  // Two aligned write buffers: one fills (copy + CRC) while the io thread writes the other.
  char* bounce_[2] = {nullptr, nullptr};
  uint64_t bounce_job_[2] = {0, 0};  // the io job writing each buffer (0: none)
  int cur_ = 0;
  size_t fill_ = 0;
  // The io thread: writes jobs in submit order, so the device always has the next write queued.
  std::thread io_;
  std::mutex io_mu_;
  std::condition_variable io_cv_;
  std::deque<IoJob> io_queue_;
  uint64_t io_submitted_ = 0, io_done_ = 0;
  bool io_stop_ = false;
  Status io_status_;  // the first write error (guarded by io_mu_)
};

// Declares, for the calling thread, that memory [begin, begin + bytes) stays unchanged and valid
// until every SafetensorsWriter that writes from it on this thread has finished or been destroyed:
// write_next may then return before its writes from that memory are done. Whoever filled the
// memory may also hand over CRC32Cs it computed on the way (CkptWriter's staging copy does), so the
// writer does not read the data a second time. CkptWriter's background thread declares its staging
// buffer around ckpt_save. Guards nest; the innermost one counts.
class SafetensorsStableMemory {
 public:
  SafetensorsStableMemory(const void* begin, int64_t bytes);
  ~SafetensorsStableMemory();
  SafetensorsStableMemory(const SafetensorsStableMemory&) = delete;
  SafetensorsStableMemory& operator=(const SafetensorsStableMemory&) = delete;

  // crc = CRC32C of the `bytes` bytes at p, inside the range; used when a tensor is exactly them.
  void add_crc(const void* p, int64_t bytes, uint32_t crc);
  bool contains(const char* p, int64_t bytes) const { return p >= begin_ && p + bytes <= end_; }
  const uint32_t* find_crc(const char* p, int64_t bytes) const;
  static const SafetensorsStableMemory* current();  // this thread's innermost guard, or null

 private:
  const char* begin_;
  const char* end_;
  std::map<const char*, std::pair<int64_t, uint32_t>> crcs_;  // start -> (bytes, CRC32C)
  SafetensorsStableMemory* prev_;
};

class SafetensorsReader {
 public:
  SafetensorsReader() = default;
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  // Reads and checks the header: length inside the file, valid JSON, known dtypes, data_offsets
  // matching shape x dtype size, tensors covering the data region without holes or overlaps.
  Status open(const std::string& path);
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in file order
  const SafetensorsTensor* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  int64_t data_start() const { return data_start_; }
  int64_t file_size() const { return file_size_; }
  // Reads `bytes` bytes at absolute offset `offset` (errors name the file, offset and what was read).
  Status read_at(int64_t offset, void* out, int64_t bytes) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  int64_t data_start_ = 0, file_size_ = 0;
};

}  // namespace smelt
