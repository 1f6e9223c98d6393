// The background checkpoint writer: two staging slots, one thread, FIFO order by submit sequence.
// Copies happen on the caller's thread (that copy is the whole stall) and compute each tensor's
// CRC32C; writing never does, and it neither copies nor rereads the staging buffer.
#include "smelt/ckpt/async_writer.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/crc32c.hpp"
#include "smelt/ckpt/safetensors.hpp"
#include "smelt/common/clock.hpp"
#include "smelt/obs/trace.hpp"

namespace smelt {

namespace {

using CopySeg = CkptCopySeg;

struct CrcPiece {  // the CRC32C of part of one segment's copy
  size_t seg;
  uint64_t bytes;
  uint32_t crc;
};

// Copies floats [begin, end) of the concatenation of segs, CRC32C in the same pass (crc32c_copy
// runs at memcpy speed), one piece per segment touched.
void copy_span(const std::vector<CopySeg>& segs, int64_t begin, int64_t end, std::vector<CrcPiece>& pieces) {
  int64_t pos = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    const CopySeg& s = segs[i];
    int64_t lo = std::max(begin, pos), hi = std::min(end, pos + s.n);
    if (lo < hi) {
      uint64_t bytes = static_cast<uint64_t>(hi - lo) * sizeof(float);
      pieces.push_back({i, bytes, crc32c_copy(0, s.dst + (lo - pos), s.src + (lo - pos), bytes)});
    }
    pos += s.n;
    if (pos >= end) break;
  }
}

// Copies with `threads` threads (the calling one included), split by bytes; a 1 MiB minimum share
// keeps small states on one thread. Each segment's CRC is joined from its pieces in order.
void copy_parallel(std::vector<CopySeg>& segs, int64_t total, int threads) {
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(1, total / (1 << 18))));
  std::vector<std::vector<CrcPiece>> pieces(static_cast<size_t>(threads));
  std::vector<std::thread> helpers;
  for (int k = 1; k < threads; ++k)
    helpers.emplace_back(copy_span, std::cref(segs), total * k / threads, total * (k + 1) / threads,
                         std::ref(pieces[static_cast<size_t>(k)]));
  copy_span(segs, 0, total / threads, pieces[0]);
  for (auto& h : helpers) h.join();
  for (CopySeg& s : segs) s.crc = 0;
  for (const auto& ps : pieces)
    for (const CrcPiece& p : ps) segs[p.seg].crc = crc32c_combine(segs[p.seg].crc, p.crc, p.bytes);
}

}  // namespace

CkptWriter::CkptWriter(std::string run_dir, int copy_threads)
    : run_dir_(std::move(run_dir)), copy_threads_(std::max(1, copy_threads)) {
  thread_ = std::thread([this] { run(); });
}

CkptWriter::~CkptWriter() {
  Status s = wait();  // joins a deferred copy first
  if (!s) spdlog::error("[ckpt] {}", s.message());
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

// 2 MiB aligned and asking for transparent huge pages: O_DIRECT pins and maps the buffer for
// every write, and 2 MiB pages make that 512x fewer pages (physically contiguous runs).
constexpr size_t kHuge = 2 << 20;

int64_t ckpt_staging_bytes(int64_t floats) {
  const size_t bytes = (static_cast<size_t>(floats) * sizeof(float) + kHuge - 1) / kHuge * kHuge;
  return (int64_t)std::max<size_t>(bytes, kHuge);
}

// Makes s hold at least `floats` floats, 4 KiB aligned, every page touched (so submit does not
// pay page faults). False when the allocation fails.
bool CkptWriter::grow(Slot& s, int64_t floats) {
  if (s.capacity >= floats) return true;
  s.buf.reset();
  s.capacity = 0;
  const size_t bytes = (size_t)ckpt_staging_bytes(floats);
  float* p = static_cast<float*>(std::aligned_alloc(kHuge, bytes));
  if (!p) return false;
  ::madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without it (or THP off) the pages are 4 KiB
  std::memset(p, 0, bytes);
  s.buf.reset(p);
  s.capacity = floats;
  return true;
}

void CkptWriter::reserve(int64_t floats) {
  std::unique_lock<std::mutex> lk(mu_);
  for (Slot& s : slots_) {
    cv_.wait(lk, [&] { return s.state == SlotState::kFree; });
    if (!grow(s, floats)) spdlog::warn("[ckpt] cannot reserve {} MB of staging memory", floats * 4 / 1000000);
  }
}

Status CkptWriter::submit(const CkptSaveRequest& r, CkptCopy copy) {
  auto t0 = std::chrono::steady_clock::now();
  staged();  // a previous deferred copy must be in its slot before this one takes a slot
  int64_t total = 0;
  for (const auto& t : r.tensors) {
    int64_t n = safetensors_numel(t.shape);
    if (n < 0) return Status::error(fmt::format("checkpoint step {}: tensor {} has an invalid shape", r.step, t.name));
    if (n > 0 && !t.data)
      return Status::error(fmt::format("checkpoint step {}: tensor {} has no data{}", r.step, t.name,
                                       t.fill ? " (fill is for the synchronous ckpt_save)" : ""));
    total += n;
  }
  Slot* slot = nullptr;
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return slots_[0].state == SlotState::kFree || slots_[1].state == SlotState::kFree; });
    if (!error_) {  // checked after the wait: a save that failed while we waited is reported now
      Status e = error_;
      error_ = Status::ok();
      return e;
    }
    slot = slots_[0].state == SlotState::kFree ? &slots_[0] : &slots_[1];
    slot->state = SlotState::kFilling;
  }
  if (!grow(*slot, total)) {
    std::lock_guard<std::mutex> lk(mu_);
    slot->state = SlotState::kFree;
    cv_.notify_all();
    return Status::error(fmt::format("checkpoint step {}: cannot allocate {} MB of staging memory", r.step,
                                     total * 4 / 1000000));
  }
  CkptSaveRequest& q = slot->req;
  q.step = r.step;
  q.rank = r.rank;
  q.ranks = r.ranks;
  q.config_toml = r.config_toml;
  q.tokenizer_path = r.tokenizer_path;
  q.state = r.state;
  q.throttle_mb_s = r.throttle_mb_s;
  q.tensors.resize(r.tensors.size());
  std::vector<CopySeg> segs;
  segs.reserve(r.tensors.size());
  int64_t off = 0;
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const CkptTensorRef& t = r.tensors[i];
    int64_t n = safetensors_numel(t.shape);
    if (n > 0) segs.push_back({slot->buf.get() + off, t.data, n});
    q.tensors[i].name = t.name;
    q.tensors[i].shape = t.shape;
    q.tensors[i].data = slot->buf.get() + off;
    off += n;
  }
  if (copy == CkptCopy::kNow) {
    copy_parallel(segs, total, copy_threads_);
    slot->segs = std::move(segs);
    enqueue(slot, ms_since(t0));
  } else {  // the caller keeps computing; staged() joins before it changes the tensors
    slot->segs = std::move(segs);
    double stall = ms_since(t0);
    copier_ = std::thread([this, slot, total, stall] {
      trace_thread_name("ckpt.copy");
      TraceSpan span("checkpoint.copy", "bytes", (double)total * sizeof(float));
      span.arg("step", (double)slot->req.step);
      copy_parallel(slot->segs, total, 1);  // one thread: it hides behind compute, not races it
      enqueue(slot, stall);
    });
  }
  return Status::ok();
}

void CkptWriter::enqueue(Slot* slot, double stall_ms) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    slot->seq = next_seq_++;
    slot->stall_ms = stall_ms;
    slot->state = SlotState::kQueued;
  }
  cv_.notify_all();
}

void CkptWriter::staged() {
  if (!copier_.joinable()) return;
  auto t0 = std::chrono::steady_clock::now();
  copier_.join();
  std::lock_guard<std::mutex> lk(mu_);
  staged_wait_ms_ = ms_since(t0);
}

double CkptWriter::last_staged_wait_ms() const {
  std::lock_guard<std::mutex> lk(mu_);
  return staged_wait_ms_;
}

Status CkptWriter::wait() {
  staged();
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] {
    for (const Slot& s : slots_)
      if (s.state == SlotState::kQueued || s.state == SlotState::kWriting) return false;
    return true;
  });
  Status e = error_;
  error_ = Status::ok();
  return e;
}

CkptSaveStats CkptWriter::last_stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return last_;
}

int64_t CkptWriter::completed() const {
  std::lock_guard<std::mutex> lk(mu_);
  return completed_;
}

void CkptWriter::run() {
  trace_thread_name("ckpt.writer");
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    Slot* next = nullptr;
    cv_.wait(lk, [&] {
      next = nullptr;
      for (Slot& s : slots_)
        if (s.state == SlotState::kQueued && (!next || s.seq < next->seq)) next = &s;
      return next != nullptr || stop_;
    });
    if (!next) return;  // stop_ and nothing queued
    next->state = SlotState::kWriting;
    lk.unlock();
    CkptSaveStats st;
    Status s;
    {  // the slot does not change until ckpt_save returns: the writer streams from it without
       // waiting, and takes the CRCs the copy computed
      SafetensorsStableMemory stable(next->buf.get(), next->capacity * static_cast<int64_t>(sizeof(float)));
      for (const CopySeg& c : next->segs) stable.add_crc(c.dst, c.n * static_cast<int64_t>(sizeof(float)), c.crc);
      TraceSpan span("checkpoint.write", "step", (double)next->req.step);
      s = ckpt_save(run_dir_, next->req, &st);
      span.arg("bytes", (double)st.bytes);
      span.arg("mb_s", st.write_mb_s);
    }
    lk.lock();
    if (s) {
      st.stall_ms = next->stall_ms;
      last_ = st;
      ++completed_;
    } else if (error_) {  // keep the first failure until someone reads it
      error_ = Status::error(fmt::format("background checkpoint save of step {} failed: {}", next->req.step,
                                         s.message()));
    }
    next->state = SlotState::kFree;
    cv_.notify_all();
  }
}

}  // namespace smelt
