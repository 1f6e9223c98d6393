// Size-capped output parts: JSON lines compressed with zstd into DIR/<prefix>NNNNN.jsonl.zst, each
// written beside its final name and renamed into place when complete, so a part on disk is always
// whole. Not a reader; not aware of documents beyond their line bytes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <zstd.h>

#include "smelt/common/files.hpp"
#include "smelt/common/status.hpp"

namespace smelt {

struct ShardInfo {
  std::string file;          // name inside the folder
  uint64_t docs = 0;
  uint64_t bytes = 0;        // uncompressed
  uint64_t compressed = 0;   // on disk
};

class ShardWriter {
 public:
  // Parts are named DIR/<prefix><index, 5 digits>.jsonl.zst; the first one written is first_index.
  ShardWriter(std::string dir, std::string prefix, uint64_t cap_bytes, int zstd_level, uint64_t first_index);
  ~ShardWriter();

  // Appends one line (without its '\n'). When the open part would pass the cap after this line,
  // the line still goes in and the part is closed: `closed` then holds it (check closed_ready()).
  Status append(std::string_view line);
  // True once after append() closed a part; the caller then persists its own state.
  bool take_closed(ShardInfo& closed);
  // Closes the open part (if it holds any line).
  Status close(ShardInfo* closed);
  uint64_t next_index() const { return index_; }
  // Name of part i.
  std::string part_name(uint64_t i) const;

 private:
  Status open_part();
  Status flush_out(ZSTD_EndDirective mode);
  std::string dir_, prefix_;
  uint64_t cap_;
  int level_;
  uint64_t index_;
  ZSTD_CCtx* cctx_ = nullptr;
  AtomicFile file_;
  bool open_ = false;
  ShardInfo cur_, closed_;
  bool has_closed_ = false;
  std::string in_buf_, out_buf_;
};

}  // namespace smelt
