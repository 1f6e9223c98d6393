// CkptWriter: asynchronous checkpoints. submit() copies the tensors into one of two staging
// buffers (allocated once, reused, 4 KiB aligned and laid out like the rank file's data, so the
// safetensors writer writes them with O_DIRECT without another copy) and returns; a background
// thread runs ckpt_save from there (write, CRC32C, fsync, commit). Not the save itself
// (checkpoint.cpp).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/common/status.hpp"

namespace smelt {

// kNow: submit copies before returning. kDeferred: submit returns at once and a helper thread
// copies while the caller computes; the caller must call staged() before it changes any tensor
// (in a trainer: submit after the optimizer step, forward/backward of the next step only read the
// parameters, staged() before the next optimizer step), so the copy hides behind compute.
enum class CkptCopy { kNow, kDeferred };

struct CkptCopySeg {  // one tensor's copy into the staging buffer (internal)
  float* dst;
  const float* src;
  int64_t n;         // floats
  uint32_t crc = 0;  // CRC32C of the n floats, computed by the copy (the writer does not reread them)
};

// The bytes one staging buffer for `floats` floats takes (2 MiB aligned and rounded: huge pages),
// for a run's memory plan.
int64_t ckpt_staging_bytes(int64_t floats);

class CkptWriter {
 public:
  // copy_threads: threads that copy into the staging buffer during submit (the caller's thread is
  // one of them); the copy is memory-bound and the caller is blocked anyway.
  explicit CkptWriter(std::string run_dir, int copy_threads = 2);
  ~CkptWriter();  // finishes every submitted save (an error is logged), then stops the thread
  CkptWriter(const CkptWriter&) = delete;
  CkptWriter& operator=(const CkptWriter&) = delete;

  // Allocates and touches both staging buffers for `floats` floats, so the first submit does not
  // pay for page faults. Optional: submit grows a buffer that is too small.
  void reserve(int64_t floats);

  // Copies r (tensor data included) and returns; r's memory may change as soon as it returns.
  // Blocks only while both staging buffers are busy (one being written, one queued).
  // A failure of an earlier background save is returned here (once) and r is not taken.
  // With ranks > 1 it saves this rank's part only: wait() on every rank, barrier, then rank 0
  // calls ckpt_commit.
  Status submit(const CkptSaveRequest& r, CkptCopy copy = CkptCopy::kNow);
  // Blocks until a kDeferred submit's copy is done (no-op otherwise); from then on the caller may
  // change its tensors. submit and wait call it first.
  void staged();
  double last_staged_wait_ms() const;  // how long the last staged() blocked
  // Blocks until every submitted save is done; returns the first background failure (once).
  Status wait();

  CkptSaveStats last_stats() const;  // of the last completed save; stall_ms = its submit's blocking
  int64_t completed() const;         // saves finished successfully

 private:
  enum class SlotState { kFree, kFilling, kQueued, kWriting };
  struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
  };
  struct Slot {
    // 4 KiB aligned: tensor k at buf + (sum of the sizes before it), i.e. at the same offset modulo
    // 4 KiB as in the file, whose data starts 4 KiB aligned (SafetensorsWriter::open).
    std::unique_ptr<float[], FreeDeleter> buf;
    int64_t capacity = 0;  // floats
    CkptSaveRequest req;
    std::vector<CkptCopySeg> segs;  // the copy that filled buf, with each tensor's CRC32C
    SlotState state = SlotState::kFree;
    uint64_t seq = 0;
    double stall_ms = 0;
  };
  void run();
  void enqueue(Slot* slot, double stall_ms);
  static bool grow(Slot& s, int64_t floats);

  std::string run_dir_;
  int copy_threads_ = 2;
  Slot slots_[2];
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t next_seq_ = 0;
  Status error_;
  CkptSaveStats last_;
  int64_t completed_ = 0;
  double staged_wait_ms_ = 0;
  std::thread copier_;
  std::thread thread_;
};

}  // namespace smelt
