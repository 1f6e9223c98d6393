// Files: input expansion (files, folders, globs) and atomic output (write beside, fsync, rename),
// so a failure never leaves a half-written file where a good one was.
#pragma once
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "smelt/common/status.hpp"

namespace smelt {

// Expands files, folders (recursively, skipping hidden entries such as ".prep-state.json") and
// glob patterns into a sorted, de-duplicated list of regular files. A pattern that matches
// nothing is an error naming it.
Status files_expand_inputs(const std::vector<std::string>& patterns, std::vector<std::string>& out);

// Writes to PATH.tmp-<pid>; commit() flushes, fsyncs and renames it over PATH, then fsyncs the
// folder. Destroyed without commit(): the temporary is removed and PATH is untouched.
class AtomicFile {
 public:
  AtomicFile() = default;
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  Status open(const std::string& path);
  Status write(std::string_view data);
  Status commit();
  void abort();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
};

// Writes a whole small file atomically.
Status files_write_atomic(const std::string& path, std::string_view data);

// Reads a whole small file (configs, state files; never inputs).
Status files_read_small(const std::string& path, std::string& out);

// XXH3-64 of a file's bytes, read in blocks (model files of many GB): what a resume fingerprint
// records of a file whose content, not only its name, decides the output.
Status files_hash(const std::string& path, uint64_t& out);

// fsync of a folder, so a rename inside it is durable.
Status files_fsync_dir(const std::string& dir);

}  // namespace smelt
