// Checkpoints (docs/checkpoint.md): a directory per step under RUN/checkpoints/, one safetensors
// file per rank plus manifest.json (step, resolved config, tokenizer hash, tensor index, every
// file's size and CRC32C, and the trainer's state: loader position, RNG, schedule, last metrics),
// written into step_XXXXXXXX.tmp/, fsynced, renamed into place, then `latest` replaced atomically.
// Verification, discovery of the newest valid checkpoint, tensor loading, retention.
// Not the training loop (train/) and not what the trainer puts in `state` (it owns that JSON).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"

namespace smelt {

// One tensor to save: fp32, row-major. The data must stay valid and unchanged until the save
// call returns (the asynchronous writer copies it into its staging buffer before returning).
// Instead of data, a synchronous ckpt_save takes `fill`: called when the tensor's turn comes to
// write its values into a buffer of the tensor's size, so a writer that produces one tensor at a
// time (the imports) holds one tensor, not all of them. Its error fails the save.
struct CkptTensorRef {
  std::string name;            // "model.layers.0.self_attn.q_proj.weight", "optim.m.<name>", ...
  std::vector<int64_t> shape;  // e.g. {rows, cols} or {size}
  const float* data = nullptr;
  std::function<Status(float* out)> fill = nullptr;  // when data is null (ckpt_save only)
};

struct CkptSaveRequest {
  int64_t step = 0;
  int rank = 0, ranks = 1;
  std::string config_toml;     // the run's fully resolved config (stored as config.toml too)
  std::string tokenizer_path;  // copied into the checkpoint as tokenizer.json when non-empty
  nlohmann::json state;        // trainer-defined: loader position, RNG, schedule, metrics, ...
  std::vector<CkptTensorRef> tensors;  // this rank's tensors
  double throttle_mb_s = 0;    // fault injection (tests): the save takes at least bytes / this
};

struct CkptSaveStats {
  std::string dir;         // the committed step directory
  int64_t bytes = 0;       // bytes written (all files of this rank)
  double stall_ms = 0;     // time the caller was blocked
  double write_ms = 0;     // time spent writing + fsyncing
  double write_mb_s = 0;   // bytes / write time
};

// "RUN/checkpoints/step_00000100"
std::string ckpt_step_dir(const std::string& run_dir, int64_t step);

// Synchronous save of one rank's shard and (rank 0, ranks == 1) the commit. With several ranks,
// every rank calls it and the caller puts a barrier before ckpt_commit (see below).
// Fails cleanly (disk full, permissions): the .tmp folder is removed and the previous checkpoint
// and `latest` are untouched.
Status ckpt_save(const std::string& run_dir, const CkptSaveRequest& r, CkptSaveStats* stats = nullptr);

// Multi-rank commit, called by rank 0 after every rank's ckpt_save returned (a barrier): merges the
// ranks' parts (step_XXXXXXXX.tmp/rank-NNNNN.json) into manifest.json, renames the folder into
// place and replaces `latest`. On failure the .tmp folder is removed. ckpt_save does this itself
// when ranks == 1.
Status ckpt_commit(const std::string& run_dir, int64_t step, int ranks, CkptSaveStats* stats = nullptr);

// Retention: keep the newest `keep_last` and every step divisible by `keep_every` (0: none);
// never deletes the newest valid checkpoint. Returns the removed directories in `removed`.
Status ckpt_retain(const std::string& run_dir, int keep_last, int64_t keep_every,
                   std::vector<std::string>* removed = nullptr);

struct CkptFile {
  std::string name;   // relative to the step directory
  int64_t size = 0;
  uint32_t crc32c = 0;
};
struct CkptTensorInfo {
  std::string name, file;      // file: the safetensors file holding it
  std::vector<int64_t> shape;
  int64_t offset = 0;          // byte offset of the data in the file
  int64_t bytes = 0;
  uint32_t crc32c = 0;         // of the data bytes: names the damaged tensor, checked on every load
};
struct CkptManifest {
  int version = 1;
  int64_t step = 0;
  int ranks = 1;
  std::string config_toml;
  std::string tokenizer_hash;  // xxh3 of tokenizer.json ("" when none)
  nlohmann::json state;
  std::vector<CkptFile> files;
  std::vector<CkptTensorInfo> tensors;
  const CkptTensorInfo* find(const std::string& name) const;
};

// Reads and checks the manifest's structure (not the file contents).
Status ckpt_read_manifest(const std::string& step_dir, CkptManifest& m);
// Full verification: manifest consistent, every file present with its size and CRC32C, every
// tensor inside its file. The error names the bad file (and tensor when it can).
Status ckpt_verify(const std::string& step_dir);

struct CkptListEntry {
  std::string dir;
  int64_t step = -1;
  int64_t bytes = 0;
  bool valid = false;
  std::string problem;  // why not valid
};
// Every step_* directory under RUN/checkpoints (not .tmp), newest first, each verified.
std::vector<CkptListEntry> ckpt_list(const std::string& run_dir);
// The newest checkpoint that verifies; each newer invalid one adds a warning saying why.
// Not found is an error ("no valid checkpoint in RUN/checkpoints").
Status ckpt_find_latest(const std::string& run_dir, std::string& step_dir,
                        std::vector<std::string>* warnings = nullptr);

// A step directory (holds manifest.json) or a run directory (then its newest valid checkpoint; each
// newer invalid one is logged as a warning) -> step_dir. The error names dir and why.
Status ckpt_resolve(const std::string& dir, std::string& step_dir);
// [model] of the config a manifest stores (config_toml); the error names step_dir's manifest.json.
struct ModelConfig;
Status ckpt_model_config(const std::string& step_dir, const CkptManifest& m, ModelConfig& c);

// Reads one tensor's data (count floats) into out; the shape must match.
Status ckpt_load_tensor(const std::string& step_dir, const CkptManifest& m, const std::string& name,
                        float* out, int64_t count);

// Tensors stored as boxes (slices) of full tensors, so a checkpoint written under one parallel
// layout loads under any other (docs/checkpoint.md, "Tensors stored as boxes"). A stored tensor
// whose box is the whole tensor keeps its plain name; a slice is "name[r0:r1,c0:c1]" (2-D) or
// "name[r0:r1]" (1-D), of stored shape {r1 - r0, c1 - c0} (or {r1 - r0}). Implemented in ckpt_box.cpp.

// A box of a full (full_rows x full_cols) tensor: rows [r0, r0 + rows), cols [c0, c0 + cols).
// 1-D tensors: full_cols = 1, c0 = 0, cols = 1.
struct CkptBox {
  int64_t r0 = 0, c0 = 0, rows = 0, cols = 1;
};
// The stored name of `box` of tensor `name`: the plain name when the box is the whole tensor, else
// "name[r0:r1,c0:c1]" (2-D: full_cols > 1) or "name[r0:r1]".
std::string ckpt_box_name(const std::string& name, const CkptBox& box, int64_t full_rows, int64_t full_cols);
// Parses a stored name into (base name, box); false when it has no box suffix (then the box is the
// whole tensor, which the caller knows).
bool ckpt_parse_box_name(const std::string& stored, std::string& base, CkptBox& box);
// Reads box `want` of the full tensor `name` into out (want.rows x want.cols floats, row-major),
// assembled from every stored entry of that name (the plain name = the whole tensor, or boxes) in
// any file. Each entry's stored shape is checked against its box and the full shape; entries that
// do not intersect `want` are not read, and overlapping boxes may be read in any order (they hold
// the same values). Fails naming the tensor, the checkpoint dir and the uncovered rows/cols when
// the stored boxes do not cover `want`.
Status ckpt_read_box(const std::string& dir, const CkptManifest& m, const std::string& name, int64_t full_rows,
                     int64_t full_cols, const CkptBox& want, float* out);
// The boxes (in full-tensor coordinates) of the flat range [a, b) of a tensor slice `local` held
// row-major (local.rows x local.cols): at most three (a partial first row, whole rows, a partial
// last row), in order, each with its flat offset in the slice. For ZeRO-1 shards that cut a tensor
// anywhere. Needs 0 <= a <= b <= local.rows * local.cols; an empty range gives none.
struct CkptFlatBox {
  int64_t offset;
  CkptBox box;
};
std::vector<CkptFlatBox> ckpt_flat_boxes(const CkptBox& local, int64_t a, int64_t b);

// Tensor naming the trainer uses: parameters under their ParamLayout (Hugging Face) names, AdamW
// moments as "optim.m.<name>" and "optim.v.<name>".
// Loads the model of a checkpoint: [model] from its config, every parameter tensor into a flat
// buffer in param_layout order, each stored whole or as boxes (ckpt_read_box). For eval, generate
// and export.
struct ModelConfig;
Status ckpt_load_model(const std::string& step_dir, ModelConfig& cfg, std::vector<float>& params,
                       CkptManifest* manifest = nullptr);

}  // namespace smelt
