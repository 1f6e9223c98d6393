// Streaming mode: refined JSONL(.zst) or text read and tokenized on background threads (one reader,
// N encoders, an ordered hand-off), then packed exactly as Loader packs an unshuffled shard of the
// same text. For users who skip `smelt tokenize`. Not here: shuffling (a stream has no random
// access; documents come in input order) and bucketed batches.
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/common/files.hpp"
#include "smelt/common/queue.hpp"
#include "smelt/dataset/loader.hpp"
#include "smelt/text/doc_reader.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

namespace {
constexpr size_t kChunkDocs = 64;
struct Chunk {
  uint64_t seq = 0;
  std::vector<std::string> texts;
  std::vector<std::vector<uint32_t>> ids;
};
}  // namespace

struct StreamSource::Impl {
  std::vector<std::string> files;
  const Tokenizer* tok = nullptr;
  std::string text_field;
  uint64_t skip = 0;
  BoundedQueue<Chunk> work{16};
  std::mutex mu;
  std::condition_variable cv_done, cv_room;
  std::map<uint64_t, Chunk> done;  // encoded chunks by sequence number
  uint64_t chunks_total = UINT64_MAX;  // set by the reader at the end
  uint64_t next_chunk = 0;
  size_t max_done = 8;
  bool stop = false;
  std::thread reader;
  std::vector<std::thread> encoders;
  Chunk cur;  // the chunk being handed out
  size_t cur_at = 0;
  bool have_cur = false;

  void read() {
    ReaderOptions ropt;
    ropt.text_field = text_field;
    uint64_t seq = 0, n = 0;
    Chunk c;
    for (const auto& f : files) {
      Status err;
      auto r = doc_reader_open(f, ropt, err);
      if (!r) {  // unreadable file: skipped, as smelt tokenize does
        spdlog::warn("{}; the file was skipped", err.message());
        continue;
      }
      RawDoc d;
      while (r->next(d)) {
        if (d.is_html) continue;  // raw HTML is not refined text (smelt tokenize skips it too)
        if (n++ < skip) continue;
        c.texts.push_back(std::move(d.text));
        d = RawDoc{};
        if (c.texts.size() == kChunkDocs) {
          c.seq = seq++;
          if (!work.push(std::move(c))) return;
          c = Chunk{};
        }
        {
          std::lock_guard lk(mu);
          if (stop) return;
        }
      }
    }
    if (!c.texts.empty()) {
      c.seq = seq++;
      if (!work.push(std::move(c))) return;
    }
    {
      std::lock_guard lk(mu);
      chunks_total = seq;
    }
    cv_done.notify_all();
    work.close();
  }

  void encode() {
    while (auto c = work.pop()) {
      c->ids.resize(c->texts.size());
      // Special-token text inside a document is ordinary text (as smelt tokenize encodes it).
      for (size_t i = 0; i < c->texts.size(); ++i) tok->encode(c->texts[i], c->ids[i], false);
      c->texts.clear();
      std::unique_lock lk(mu);
      cv_room.wait(lk, [&] { return stop || c->seq < next_chunk + max_done; });
      if (stop) return;
      done.emplace(c->seq, std::move(*c));
      cv_done.notify_all();
    }
  }
};

StreamSource::StreamSource() = default;
StreamSource::~StreamSource() { close(); }

Status StreamSource::open(const std::vector<std::string>& inputs, const Tokenizer& tok, int threads,
                          uint64_t skip_docs, const std::string& text_field) {
  close();
  impl_ = std::make_unique<Impl>();
  if (Status s = files_expand_inputs(inputs, impl_->files); !s) return s;
  impl_->tok = &tok;
  impl_->text_field = text_field;
  impl_->skip = skip_docs;
  impl_->max_done = 4 * static_cast<size_t>(std::max(threads, 1));
  Impl* m = impl_.get();
  impl_->reader = std::thread([m] { m->read(); });
  for (int i = 0; i < std::max(threads, 1); ++i) impl_->encoders.emplace_back([m] { m->encode(); });
  return Status::ok();
}

bool StreamSource::next(std::vector<uint32_t>& ids) {
  Impl& m = *impl_;
  while (!m.have_cur || m.cur_at == m.cur.ids.size()) {
    std::unique_lock lk(m.mu);
    m.cv_done.wait(lk, [&] { return m.done.count(m.next_chunk) || m.next_chunk >= m.chunks_total; });
    if (!m.done.count(m.next_chunk)) return false;
    m.cur = std::move(m.done[m.next_chunk]);
    m.done.erase(m.next_chunk++);
    m.cur_at = 0, m.have_cur = true;
    m.cv_room.notify_all();
  }
  ids = std::move(m.cur.ids[m.cur_at++]);
  return true;
}

void StreamSource::close() {
  if (!impl_) return;
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->work.close();
  impl_->cv_room.notify_all();
  impl_->cv_done.notify_all();
  if (impl_->reader.joinable()) impl_->reader.join();
  for (auto& t : impl_->encoders) t.join();
  impl_.reset();
}

// ---- the loader over a stream ----

StreamLoader::StreamLoader() = default;
StreamLoader::~StreamLoader() { close(); }

Status StreamLoader::open(const LoaderConfig& c, const LoaderPosition* resume) {
  close();
  c_ = c;
  if (c_.stream_tokenizer.empty()) return Status::error("[data] stream_tokenizer: empty; streaming mode needs a tokenizer file");
  if (c_.mode != BatchMode::kPacked)
    return Status::error(fmt::format("[data] mode = \"{}\": streaming mode packs (\"packed\") only", enum_name(c_.mode)));
  if (Status s = loader_config_validate(c_); !s) return s;
  tok_ = std::make_unique<Tokenizer>();
  if (Status s = Tokenizer::load(c_.stream_tokenizer, *tok_); !s) return s;
  eod_ = c_.eod_id >= 0 ? c_.eod_id : (tok_->eod_id() ? static_cast<int64_t>(*tok_->eod_id()) : -1);
  if (c_.append_eod && eod_ < 0)
    return Status::error(fmt::format("[data] append_eod: the tokenizer {} has no end-of-document token; set data.eod_id",
                                     c_.stream_tokenizer));
  inputs_.clear();
  for (size_t at = 0; at <= c_.sources.size();) {
    size_t e = c_.sources.find(',', at);
    if (e == std::string::npos) e = c_.sources.size();
    if (e > at) inputs_.push_back(c_.sources.substr(at, e - at));
    at = e + 1;
  }
  cur_ = SourceCursor{};
  step_ = 0;
  if (resume) {
    step_ = resume->step;
    if (auto it = resume->sources.find("stream"); it != resume->sources.end()) cur_ = it->second;
  }
  // Global document numbers: the cursor's epoch starts at number 0.
  epoch_docs_.assign(1, 0);  // [i]: global number where epoch (cur_.epoch + i) starts
  base_ = read_ = cur_.docs;
  docs_.clear();
  if (Status s = src_.open(inputs_, *tok_, c_.stream_threads, cur_.docs); !s) return s;
  if (!pull(cur_.docs))
    return Status::error(fmt::format("[data] sources: the input {} holds no document{}", c_.sources,
                                     cur_.docs ? fmt::format(" at or after the resume position (document {})", cur_.docs) : ""));
  fetch_ = LatencyWindow(static_cast<size_t>(c_.latency_window));
  loader_batch_reserve(batch_, c_.batch_size / c_.ranks + 1, c_.seq_len);
  return Status::ok();
}

bool StreamLoader::pull(uint64_t upto) {
  while (read_ <= upto) {
    std::vector<uint32_t> ids;
    if (!src_.next(ids)) {
      uint64_t start = epoch_docs_.back();
      if (read_ == start) return false;  // an empty input: nothing to train on
      epoch_docs_.push_back(read_);      // the input ends: the next epoch starts here
      src_.close();
      if (!src_.open(inputs_, *tok_, c_.stream_threads, 0)) return false;
      continue;
    }
    docs_.push_back(std::move(ids));
    ++read_;
  }
  return true;
}

const Batch& StreamLoader::next() {
  auto t0 = std::chrono::steady_clock::now();
  // The cursor is a global document number g plus a token offset.
  uint64_t g = cur_.docs + epoch_docs_[0], off = cur_.offset;  // epoch_docs_[0]: where the cursor's epoch starts
  const int T = c_.seq_len, GB = c_.batch_size;
  const int r0 = static_cast<int>(static_cast<int64_t>(c_.rank) * GB / c_.ranks);
  const int r1 = static_cast<int>(static_cast<int64_t>(c_.rank + 1) * GB / c_.ranks);
  plan_.pieces.clear();
  plan_.step = step_, plan_.packed = true, plan_.T = T, plan_.global_B = GB, plan_.B = r1 - r0;
  bool ok = true;
  auto walk = [&](uint64_t& gd, uint64_t& of, uint64_t n, uint32_t row, bool emit, bool& first) {
    while (n > 0) {
      if (!pull(gd)) { ok = false; return; }
      uint64_t len = docs_[gd - base_].size();
      uint64_t total = len + (c_.append_eod ? 1 : 0);
      Piece p;
      p.row = row, p.source = 0, p.doc = gd;
      if (of < len) {
        uint64_t take = std::min(len - of, n);
        p.begin = of, p.count = static_cast<uint32_t>(take), p.doc_start = of == 0 || first;
        of += take, n -= take;
        if (emit) plan_.pieces.push_back(p);
        first = false;
      } else if (of < total) {
        p.eod = true, p.count = 1, p.doc_start = first;
        of += 1, n -= 1;
        if (emit) plan_.pieces.push_back(p);
        first = false;
      }
      if (of >= total) of = 0, ++gd;
    }
  };
  for (int r = 0; r < GB && ok; ++r) {
    bool emit = r >= r0 && r < r1, first = true;
    uint32_t row = static_cast<uint32_t>(r - r0);
    walk(g, off, static_cast<uint64_t>(T), row, emit, first);
    if (emit) {
      uint64_t pg = g, po = off;
      walk(pg, po, 1, row, true, first);
    }
  }
  // back to (epoch, docs, offset): epochs that started at or before g
  while (epoch_docs_.size() > 1 && epoch_docs_[1] <= g) epoch_docs_.erase(epoch_docs_.begin()), ++cur_.epoch;
  cur_.docs = g - epoch_docs_[0], cur_.offset = off;
  cur_.units += static_cast<uint64_t>(GB);  // rows, as Loader counts them
  auto wait_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  packing_fill(plan_, [this](uint16_t, uint64_t doc, uint64_t begin, uint64_t count, int32_t* o) {
    const auto& d = docs_[doc - base_];
    for (uint64_t k = 0; k < count; ++k) o[k] = static_cast<int32_t>(d[begin + k]);
  }, eod_, c_.doc_mask, batch_);
  ++step_;
  // drop documents the cursor has passed
  while (base_ < g && !docs_.empty()) docs_.pop_front(), ++base_;
  last_wait_ms_ = wait_ms;
  fetch_.add(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return batch_;
}

LoaderPosition StreamLoader::position() const {
  LoaderPosition p;
  p.step = step_;
  p.blend = "stream";
  p.sources["stream"] = cur_;
  return p;
}

void StreamLoader::close() { src_.close(); }

}  // namespace smelt
