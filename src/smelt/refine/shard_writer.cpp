// zstd-compressed JSONL parts with a size cap and atomic commit (AtomicFile).
#include "smelt/refine/shard_writer.hpp"

#include <filesystem>

#include <fmt/format.h>

namespace smelt {

ShardWriter::ShardWriter(std::string dir, std::string prefix, uint64_t cap_bytes, int zstd_level,
                         uint64_t first_index)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), cap_(cap_bytes), level_(zstd_level),
      index_(first_index) {
  cctx_ = ZSTD_createCCtx();
  out_buf_.resize(ZSTD_CStreamOutSize());
}

ShardWriter::~ShardWriter() {
  file_.abort();
  ZSTD_freeCCtx(cctx_);
}

std::string ShardWriter::part_name(uint64_t i) const {
  return fmt::format("{}{:05d}.jsonl.zst", prefix_, i);
}

Status ShardWriter::open_part() {
  ZSTD_CCtx_reset(cctx_, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, level_);
  ZSTD_CCtx_setParameter(cctx_, ZSTD_c_checksumFlag, 1);
  cur_ = ShardInfo{part_name(index_), 0, 0, 0};
  if (Status s = file_.open((std::filesystem::path(dir_) / cur_.file).string()); !s) return s;
  open_ = true;
  return Status::ok();
}

Status ShardWriter::flush_out(ZSTD_EndDirective mode) {
  ZSTD_inBuffer in{in_buf_.data(), in_buf_.size(), 0};
  for (;;) {
    ZSTD_outBuffer out{out_buf_.data(), out_buf_.size(), 0};
    size_t rest = ZSTD_compressStream2(cctx_, &out, &in, mode);
    if (ZSTD_isError(rest))
      return Status::error(fmt::format("{}: zstd: {}", cur_.file, ZSTD_getErrorName(rest)));
    if (Status s = file_.write(std::string_view(out_buf_.data(), out.pos)); !s) return s;
    cur_.compressed += out.pos;
    bool done = mode == ZSTD_e_end ? rest == 0 : in.pos == in.size;
    if (done) break;
  }
  in_buf_.clear();
  return Status::ok();
}

Status ShardWriter::append(std::string_view line) {
  if (!open_) {
    if (Status s = open_part(); !s) return s;
  }
  in_buf_.append(line);
  in_buf_.push_back('\n');
  cur_.docs += 1;
  cur_.bytes += line.size() + 1;
  if (in_buf_.size() >= (1u << 20)) {
    if (Status s = flush_out(ZSTD_e_continue); !s) return s;
  }
  if (cur_.bytes >= cap_) {
    ShardInfo done;
    if (Status s = close(&done); !s) return s;
    closed_ = done;
    has_closed_ = true;
  }
  return Status::ok();
}

bool ShardWriter::take_closed(ShardInfo& closed) {
  if (!has_closed_) return false;
  closed = closed_;
  has_closed_ = false;
  return true;
}

Status ShardWriter::close(ShardInfo* closed) {
  if (!open_) return Status::ok();
  if (Status s = flush_out(ZSTD_e_end); !s) return s;
  if (Status s = file_.commit(); !s) return s;
  open_ = false;
  if (closed) *closed = cur_;
  ++index_;
  return Status::ok();
}

}  // namespace smelt
