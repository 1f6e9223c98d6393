// Checkpoint save (write into step_XXXXXXXX.tmp/, fsync every file and the folder, rename, replace
// `latest`), verification, discovery, retention and loading. Manifest fields are documented in
// docs/checkpoint.md and checked one by one in manifest_from_json. Not the async writer
// (async_writer.cpp) and not the trainer's state contents.
#include "smelt/ckpt/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include "smelt/ckpt/crc32c.hpp"
#include "smelt/ckpt/safetensors.hpp"
#include "smelt/common/clock.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/params.hpp"

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace smelt {

namespace {

constexpr int kVersion = 1;
constexpr const char* kFormat = "smelt-checkpoint";
constexpr const char* kCrcField = "\"manifest_crc32c\": \"";
constexpr int64_t kReadChunk = 4 << 20;

std::string hex32(uint32_t v) { return fmt::format("{:08x}", v); }

bool parse_hex32(const std::string& s, uint32_t& v) {
  if (s.size() != 8) return false;
  v = 0;
  for (char c : s) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint32_t>(d);
  }
  return true;
}

std::string ckpt_root(const std::string& run_dir) { return (fs::path(run_dir) / "checkpoints").string(); }
std::string step_name(int64_t step) { return fmt::format("step_{:08d}", step); }
std::string rank_file(int rank) { return fmt::format("rank-{:05d}.safetensors", rank); }
std::string rank_part(int rank) { return fmt::format("rank-{:05d}.json", rank); }

// Writes a small file inside the .tmp folder and fsyncs it (the folder is renamed as a whole, so
// no per-file rename is needed).
Status write_synced(const std::string& path, std::string_view data, uint32_t* crc) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::error(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      ::close(fd);
      return Status::error(fmt::format("{}: write failed at byte {}: {}", path, done, std::strerror(err)));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return Status::error(fmt::format("{}: fsync failed: {}", path, std::strerror(err)));
  }
  if (::close(fd) != 0) return Status::error(fmt::format("{}: close failed: {}", path, std::strerror(errno)));
  if (crc) *crc = crc32c_update(0, data.data(), data.size());
  return Status::ok();
}

// CRC32C of a whole file, or of [offset, offset+bytes) when bytes >= 0.
Status crc_of_file(const std::string& path, int64_t offset, int64_t bytes, std::vector<char>& buf, uint32_t& crc) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  buf.resize(kReadChunk);
  crc = 0;
  int64_t pos = offset, left = bytes;
  while (bytes < 0 || left > 0) {
    size_t want = bytes < 0 ? buf.size() : static_cast<size_t>(std::min<int64_t>(left, kReadChunk));
    ssize_t r = ::pread(fd, buf.data(), want, pos);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      return Status::error(fmt::format("{}: read failed at byte {}: {}", path, pos, std::strerror(err)));
    }
    if (r == 0) {
      ::close(fd);
      if (bytes < 0) return Status::ok();
      return Status::error(fmt::format("{}: file ends at byte {}, expected data up to byte {}", path, pos,
                                       offset + bytes));
    }
    crc = crc32c_update(crc, buf.data(), static_cast<size_t>(r));
    pos += r;
    left -= r;
  }
  ::close(fd);
  return Status::ok();
}

// .tmp folders this process is writing right now (a CkptWriter in the background and a
// synchronous save in the foreground must not delete each other's work).
std::mutex g_active_mu;
std::set<std::string> g_active;

struct ActiveTmp {
  std::string path;
  explicit ActiveTmp(std::string p) : path(std::move(p)) {
    std::lock_guard<std::mutex> lk(g_active_mu);
    g_active.insert(path);
  }
  ~ActiveTmp() {
    std::lock_guard<std::mutex> lk(g_active_mu);
    g_active.erase(path);
  }
};

// A crash while re-saving a step can leave the older copy moved aside (step_X.old.tmp) and the new
// one not yet renamed into place: put the older copy back rather than lose it.
void restore_replaced(const std::string& root) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) != 0 || !n.ends_with(".old.tmp")) continue;
    fs::path back = e.path().parent_path() / n.substr(0, n.size() - 8);
    if (!fs::exists(back, ec) && std::rename(e.path().c_str(), back.c_str()) == 0) {
      spdlog::warn("[ckpt] restored {} that an interrupted save had moved aside", back.string());
      if (Status s = files_fsync_dir(root); !s) spdlog::warn("[ckpt] {}: the rename may not be durable", s.message());
    }
  }
}

// Removes leftovers of interrupted saves, deletions and `latest` updates: step_*.tmp folders
// (all of them but `keep` and those this process is writing) and latest.tmp-* files of other
// processes.
void remove_leftovers(const std::string& root, const std::string& keep) {
  restore_replaced(root);
  std::error_code ec;
  std::string own_latest = fmt::format("latest.tmp-{}-", getpid());
  std::lock_guard<std::mutex> lk(g_active_mu);
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string n = e.path().filename().string();
    bool tmp_dir = n.rfind("step_", 0) == 0 && n.ends_with(".tmp") && !g_active.count(e.path().string());
    bool tmp_latest = n.rfind("latest.tmp-", 0) == 0 && n.rfind(own_latest, 0) != 0;
    if ((tmp_dir && n != keep) || tmp_latest) {
      spdlog::warn("[ckpt] removing {} left by an interrupted save", e.path().string());
      fs::remove_all(e.path(), ec);
    }
  }
}

// One rank's part of the manifest: its files and tensors; rank 0 adds the run-level fields.
struct RankPart {
  std::vector<CkptFile> files;
  std::vector<CkptTensorInfo> tensors;
  int64_t bytes = 0;
  ojson rank0;  // rank 0 only: config_toml, tokenizer_hash, state
};

ojson part_to_json(const RankPart& p) {
  ojson j;
  j["files"] = ojson::array();
  for (const auto& f : p.files) j["files"].push_back({{"name", f.name}, {"size", f.size}, {"crc32c", hex32(f.crc32c)}});
  j["tensors"] = ojson::array();
  for (const auto& t : p.tensors)
    j["tensors"].push_back({{"name", t.name}, {"file", t.file}, {"shape", t.shape}, {"offset", t.offset},
                            {"bytes", t.bytes}, {"crc32c", hex32(t.crc32c)}});
  j["bytes"] = p.bytes;
  if (!p.rank0.is_null()) j["rank0"] = p.rank0;
  return j;
}

Status write_rank(const std::string& tmp, const CkptSaveRequest& r, RankPart& part) {
  std::vector<SafetensorsTensor> specs;
  specs.reserve(r.tensors.size());
  for (const auto& t : r.tensors) {
    SafetensorsTensor s;
    s.name = t.name;
    s.shape = t.shape;
    int64_t n = safetensors_numel(t.shape);
    if (n < 0) return Status::error(fmt::format("checkpoint step {}: tensor {} has an invalid shape", r.step, t.name));
    if (n > 0 && !t.data && !t.fill)
      return Status::error(fmt::format("checkpoint step {}: tensor {} has no data", r.step, t.name));
    specs.push_back(std::move(s));
  }
  std::string file = rank_file(r.rank);
  std::string path = (fs::path(tmp) / file).string();
  SafetensorsWriter w;
  std::map<std::string, std::string> meta = {{"format", "smelt"},
                                             {"step", std::to_string(r.step)},
                                             {"rank", std::to_string(r.rank)},
                                             {"ranks", std::to_string(r.ranks)}};
  if (Status s = w.open(path, specs, meta); !s) return s;
  std::vector<float> filled;  // a `fill` tensor's values, one tensor at a time
  for (const auto& t : r.tensors) {
    const float* data = t.data;
    if (!data && t.fill) {
      filled.assign((size_t)safetensors_numel(t.shape), 0.0f);
      if (Status s = t.fill(filled.data()); !s) return s;
      data = filled.data();
    }
    if (Status s = w.write_next(data); !s) return s;
  }
  if (Status s = w.finish(); !s) return s;
  part.files.push_back({file, w.file_bytes(), w.file_crc32c()});
  part.bytes += w.file_bytes();
  for (const auto& t : w.tensors()) part.tensors.push_back({t.name, file, t.shape, t.begin, t.bytes(), t.crc32c});

  if (r.rank == 0) {
    uint32_t crc = 0;
    std::string cfg_path = (fs::path(tmp) / "config.toml").string();
    if (Status s = write_synced(cfg_path, r.config_toml, &crc); !s) return s;
    part.files.push_back({"config.toml", static_cast<int64_t>(r.config_toml.size()), crc});
    part.bytes += static_cast<int64_t>(r.config_toml.size());
    std::string tok_hash;
    if (!r.tokenizer_path.empty()) {
      std::string tok;
      if (Status s = files_read_small(r.tokenizer_path, tok); !s) return s;
      tok_hash = fmt::format("{:016x}", hash64(tok));
      if (Status s = write_synced((fs::path(tmp) / "tokenizer.json").string(), tok, &crc); !s) return s;
      part.files.push_back({"tokenizer.json", static_cast<int64_t>(tok.size()), crc});
      part.bytes += static_cast<int64_t>(tok.size());
    }
    part.rank0 = {{"config_toml", r.config_toml}, {"tokenizer_hash", tok_hash}, {"state", r.state}};
  }
  return Status::ok();
}

Status part_from_json(const ojson& j, RankPart& p) {
  try {
    for (const auto& f : j.at("files")) {
      CkptFile cf{f.at("name").get<std::string>(), f.at("size").get<int64_t>(), 0};
      if (!parse_hex32(f.at("crc32c").get<std::string>(), cf.crc32c)) return Status::error("bad crc32c");
      p.files.push_back(cf);
    }
    for (const auto& t : j.at("tensors")) {
      CkptTensorInfo ti{t.at("name").get<std::string>(), t.at("file").get<std::string>(),
                        t.at("shape").get<std::vector<int64_t>>(), t.at("offset").get<int64_t>(),
                        t.at("bytes").get<int64_t>(), 0};
      if (!parse_hex32(t.at("crc32c").get<std::string>(), ti.crc32c)) return Status::error("bad crc32c");
      p.tensors.push_back(std::move(ti));
    }
    p.bytes = j.at("bytes").get<int64_t>();
    if (j.contains("rank0")) p.rank0 = j["rank0"];
  } catch (const std::exception& e) {
    return Status::error(e.what());
  }
  return Status::ok();
}

// Serialises the manifest with its own CRC32C as the last field: the CRC covers the text with the
// field's value written as "00000000", so checking needs no re-serialisation.
std::string manifest_text(int64_t step, int ranks, const std::vector<RankPart>& parts) {
  ojson m;
  m["format"] = kFormat;
  m["version"] = kVersion;
  m["step"] = step;
  m["ranks"] = ranks;
  m["tokenizer_hash"] = parts[0].rank0.at("tokenizer_hash");
  m["files"] = ojson::array();
  m["tensors"] = ojson::array();
  for (const auto& p : parts) {
    ojson pj = part_to_json(p);
    for (auto& f : pj["files"]) m["files"].push_back(f);
    for (auto& t : pj["tensors"]) m["tensors"].push_back(t);
  }
  m["state"] = parts[0].rank0.at("state");
  m["config_toml"] = parts[0].rank0.at("config_toml");
  m["manifest_crc32c"] = "00000000";
  std::string text = m.dump(1) + "\n";
  size_t at = text.rfind(kCrcField) + std::strlen(kCrcField);
  std::string crc = hex32(crc32c_update(0, text.data(), text.size()));
  text.replace(at, 8, crc);
  return text;
}

// The commit: manifest.json, drop anything not listed, fsync, rename into place, replace `latest`.
// On failure the .tmp folder is removed and a replaced older folder of the same step is restored.
Status commit_parts(const std::string& run_dir, int64_t step, int ranks, std::vector<RankPart>& parts,
                    CkptSaveStats* stats) {
  std::string root = ckpt_root(run_dir);
  std::string final_dir = (fs::path(root) / step_name(step)).string();
  std::string tmp = final_dir + ".tmp", old = final_dir + ".old.tmp";
  std::error_code ec;
  auto fail = [&](Status s) {
    fs::remove_all(tmp, ec);
    return s;
  };
  std::set<std::string> names;
  std::set<std::string> keep = {"manifest.json"};
  for (const auto& p : parts) {
    for (const auto& f : p.files) keep.insert(f.name);
    for (const auto& t : p.tensors)
      if (!names.insert(t.name).second)
        return fail(Status::error(fmt::format("checkpoint {}: tensor {} is saved by more than one rank", tmp, t.name)));
  }
  std::string text = manifest_text(step, ranks, parts);
  if (Status s = write_synced((fs::path(tmp) / "manifest.json").string(), text, nullptr); !s) return fail(s);
  for (const auto& e : fs::directory_iterator(tmp, ec))
    if (!keep.count(e.path().filename().string())) fs::remove_all(e.path(), ec);
  if (Status s = files_fsync_dir(tmp); !s) return fail(s);

  bool replaced = false;
  if (fs::exists(final_dir, ec)) {  // re-saving a step (resumed from an older checkpoint)
    fs::remove_all(old, ec);
    if (std::rename(final_dir.c_str(), old.c_str()) != 0)
      return fail(Status::error(fmt::format("{}: cannot move the older checkpoint aside: {}", final_dir,
                                            std::strerror(errno))));
    replaced = true;
  }
  if (std::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    Status s = Status::error(fmt::format("{}: rename to {} failed: {}", tmp, final_dir, std::strerror(errno)));
    if (replaced) std::rename(old.c_str(), final_dir.c_str());
    return fail(s);
  }
  if (Status s = files_fsync_dir(root); !s) return s;
  if (replaced) fs::remove_all(old, ec);
  if (Status s = files_write_atomic((fs::path(root) / "latest").string(), step_name(step) + "\n"); !s)
    return Status::error(fmt::format("{} is committed but `latest` was not updated: {}", final_dir, s.message()));
  if (stats) {
    stats->dir = final_dir;
    stats->bytes += static_cast<int64_t>(text.size());
  }
  return Status::ok();
}

bool is_step_dir_name(const std::string& n, int64_t* step) {
  if (n.size() < 6 || n.rfind("step_", 0) != 0) return false;
  for (size_t i = 5; i < n.size(); ++i)
    if (n[i] < '0' || n[i] > '9') return false;
  if (n.size() > 5 + 18) return false;
  if (step) *step = std::stoll(n.substr(5));
  return true;
}

struct StepDir {
  std::string dir;
  int64_t step;
};

std::vector<StepDir> scan_steps(const std::string& run_dir) {
  std::vector<StepDir> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ckpt_root(run_dir), ec)) {
    int64_t step;
    if (e.is_directory(ec) && is_step_dir_name(e.path().filename().string(), &step))
      out.push_back({e.path().string(), step});
  }
  std::sort(out.begin(), out.end(), [](const StepDir& a, const StepDir& b) { return a.step > b.step; });
  return out;
}

Status manifest_from_json(const std::string& path, const nlohmann::json& j, CkptManifest& m) {
  auto bad = [&](const std::string& what) { return Status::error(fmt::format("{}: {}", path, what)); };
  try {
    if (!j.is_object()) return bad("not a JSON object");
    if (j.value("format", "") != kFormat) return bad(fmt::format("format is not \"{}\"", kFormat));
    m.version = j.at("version").get<int>();
    if (m.version != kVersion)
      return bad(fmt::format("version {} is not supported (this build reads version {})", m.version, kVersion));
    m.step = j.at("step").get<int64_t>();
    m.ranks = j.at("ranks").get<int>();
    if (m.step < 0 || m.ranks < 1) return bad("step must be >= 0 and ranks >= 1");
    m.config_toml = j.at("config_toml").get<std::string>();
    m.tokenizer_hash = j.at("tokenizer_hash").get<std::string>();
    m.state = j.at("state");
    m.files.clear();
    m.tensors.clear();
    std::set<std::string> files, tensors;
    for (const auto& f : j.at("files")) {
      CkptFile cf{f.at("name").get<std::string>(), f.at("size").get<int64_t>(), 0};
      if (cf.name.empty() || cf.name.find('/') != std::string::npos || cf.name == "." || cf.name == "..")
        return bad(fmt::format("file name '{}' is not a plain name", cf.name));
      if (cf.size < 0 || !parse_hex32(f.at("crc32c").get<std::string>(), cf.crc32c))
        return bad(fmt::format("file {}: bad size or crc32c", cf.name));
      if (!files.insert(cf.name).second) return bad(fmt::format("file {} listed twice", cf.name));
      m.files.push_back(cf);
    }
    for (int r = 0; r < m.ranks; ++r)
      if (!files.count(rank_file(r))) return bad(fmt::format("ranks = {} but {} is not listed", m.ranks, rank_file(r)));
    for (const auto& t : j.at("tensors")) {
      CkptTensorInfo ti{t.at("name").get<std::string>(), t.at("file").get<std::string>(),
                        t.at("shape").get<std::vector<int64_t>>(), t.at("offset").get<int64_t>(),
                        t.at("bytes").get<int64_t>(), 0};
      if (!parse_hex32(t.at("crc32c").get<std::string>(), ti.crc32c))
        return bad(fmt::format("tensor {}: bad crc32c", ti.name));
      if (!files.count(ti.file) || !ti.file.ends_with(".safetensors"))
        return bad(fmt::format("tensor {}: file {} is not a listed .safetensors file", ti.name, ti.file));
      int64_t n = safetensors_numel(ti.shape);
      if (n < 0 || ti.bytes != 4 * n || ti.offset < 0)
        return bad(fmt::format("tensor {}: {} bytes at offset {} do not match an F32 shape", ti.name, ti.bytes,
                               ti.offset));
      if (!tensors.insert(ti.name).second) return bad(fmt::format("tensor {} listed twice", ti.name));
      m.tensors.push_back(std::move(ti));
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(fmt::format("missing or mistyped field: {}", e.what()));
  }
  return Status::ok();
}

// Manifest, file sizes and safetensors headers against the manifest; no CRC pass (retention).
Status verify_structure(const std::string& step_dir, CkptManifest& m) {
  if (Status s = ckpt_read_manifest(step_dir, m); !s) return s;
  for (const auto& f : m.files) {
    std::string p = (fs::path(step_dir) / f.name).string();
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0)
      return Status::error(fmt::format("{}: missing ({}; listed in manifest.json)", p, std::strerror(errno)));
    if (st.st_size != f.size)
      return Status::error(fmt::format("{}: {} bytes, manifest.json says {} ({})", p, st.st_size, f.size,
                                       st.st_size < f.size ? "truncated" : "overwritten or appended to"));
  }
  for (const auto& f : m.files) {
    if (!f.name.ends_with(".safetensors")) continue;
    std::string p = (fs::path(step_dir) / f.name).string();
    SafetensorsReader rd;
    if (Status s = rd.open(p); !s) return s;
    size_t listed = 0;
    for (const auto& t : m.tensors) {
      if (t.file != f.name) continue;
      ++listed;
      const SafetensorsTensor* h = rd.find(t.name);
      if (!h) return Status::error(fmt::format("{}: tensor {} is in manifest.json but not in the file", p, t.name));
      if (h->dtype != "F32" || h->begin != t.offset || h->bytes() != t.bytes || h->shape != t.shape)
        return Status::error(fmt::format("{}: tensor {}: header (dtype {}, bytes {}..{}) disagrees with manifest.json "
                                         "(F32, bytes {}..{})",
                                         p, t.name, h->dtype, h->begin, h->end, t.offset, t.offset + t.bytes));
    }
    if (listed != rd.tensors().size())
      return Status::error(fmt::format("{}: {} tensors in the file, {} in manifest.json", p, rd.tensors().size(), listed));
  }
  return Status::ok();
}

}  // namespace

const CkptTensorInfo* CkptManifest::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::string ckpt_step_dir(const std::string& run_dir, int64_t step) {
  return (fs::path(ckpt_root(run_dir)) / step_name(step)).string();
}

Status ckpt_save(const std::string& run_dir, const CkptSaveRequest& r, CkptSaveStats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  if (r.step < 0 || r.ranks < 1 || r.rank < 0 || r.rank >= r.ranks)
    return Status::error(fmt::format("checkpoint: step {} rank {} of {}: need step >= 0 and 0 <= rank < ranks",
                                     r.step, r.rank, r.ranks));
  std::string root = ckpt_root(run_dir);
  std::string tmp = ckpt_step_dir(run_dir, r.step) + ".tmp";
  std::error_code ec;
  bool created = fs::create_directories(root, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create: {}", root, ec.message()));
  if (created) {  // the new checkpoints/ entry
    if (Status s = files_fsync_dir(fs::path(root).parent_path().string()); !s) return s;
  }
  ActiveTmp active(tmp);
  if (r.ranks == 1) {
    remove_leftovers(root, "");
  } else if (r.rank == 0) {
    remove_leftovers(root, fs::path(tmp).filename().string());  // other ranks are writing into tmp
  }
  fs::create_directories(tmp, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create: {}", tmp, ec.message()));

  CkptSaveStats st;
  std::vector<RankPart> parts(1);
  Status s = write_rank(tmp, r, parts[0]);
  st.bytes = parts[0].bytes;
  if (s && r.throttle_mb_s > 0)  // fault injection: a slow disk
    std::this_thread::sleep_until(t0 + std::chrono::microseconds((int64_t)(st.bytes / r.throttle_mb_s)));
  if (s && r.ranks > 1) {
    std::string part = part_to_json(parts[0]).dump();
    s = write_synced((fs::path(tmp) / rank_part(r.rank)).string(), part, nullptr);
  }
  if (!s) {
    if (r.ranks == 1) {
      fs::remove_all(tmp, ec);
    } else {  // other ranks may still be writing: drop only this rank's files; the commit fails
      fs::remove((fs::path(tmp) / rank_file(r.rank)), ec);
      fs::remove((fs::path(tmp) / rank_part(r.rank)), ec);
    }
    return s;
  }
  if (r.ranks == 1) {
    if (Status c = commit_parts(run_dir, r.step, 1, parts, &st); !c) return c;
  } else {
    st.dir = ckpt_step_dir(run_dir, r.step);
  }
  st.write_ms = st.stall_ms = ms_since(t0);
  st.write_mb_s = st.write_ms > 0 ? st.bytes / 1e6 / (st.write_ms / 1e3) : 0;
  if (stats) *stats = st;
  return Status::ok();
}

Status ckpt_commit(const std::string& run_dir, int64_t step, int ranks, CkptSaveStats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  std::string tmp = ckpt_step_dir(run_dir, step) + ".tmp";
  std::error_code ec;
  std::vector<RankPart> parts(static_cast<size_t>(std::max(ranks, 1)));
  for (int r = 0; r < ranks; ++r) {
    std::string p = (fs::path(tmp) / rank_part(r)).string(), text;
    Status s = files_read_small(p, text);
    if (s) {
      ojson j = ojson::parse(text, nullptr, false);
      s = j.is_discarded() ? Status::error("not JSON") : part_from_json(j, parts[static_cast<size_t>(r)]);
      if (!s) s = Status::error(fmt::format("{}: {}", p, s.message()));
    }
    if (!s) {
      fs::remove_all(tmp, ec);
      return Status::error(fmt::format("checkpoint step {}: rank {} did not finish its part: {}", step, r, s.message()));
    }
  }
  if (parts[0].rank0.is_null()) {
    fs::remove_all(tmp, ec);
    return Status::error(fmt::format("{}: rank 0's part has no config and state", tmp));
  }
  CkptSaveStats st;
  if (Status s = commit_parts(run_dir, step, ranks, parts, &st); !s) return s;
  st.write_ms = st.stall_ms = ms_since(t0);
  if (stats) *stats = st;
  return Status::ok();
}

Status ckpt_read_manifest(const std::string& step_dir, CkptManifest& m) {
  std::string path = (fs::path(step_dir) / "manifest.json").string(), text;
  std::error_code ec;
  if (!fs::exists(path, ec))
    return Status::error(fmt::format("{}: missing (the save never committed, or the file was deleted)", path));
  if (Status s = files_read_small(path, text); !s) return s;
  size_t at = text.rfind(kCrcField);
  uint32_t stored = 0;
  if (at == std::string::npos || at + std::strlen(kCrcField) + 8 > text.size() ||
      !parse_hex32(text.substr(at + std::strlen(kCrcField), 8), stored))
    return Status::error(fmt::format("{}: no \"manifest_crc32c\" field (truncated or not a Smelt manifest)", path));
  std::string zeroed = text;
  zeroed.replace(at + std::strlen(kCrcField), 8, "00000000");
  uint32_t actual = crc32c_update(0, zeroed.data(), zeroed.size());
  if (actual != stored)
    return Status::error(fmt::format("{}: CRC32C {} but the manifest says {} (the manifest is corrupted)", path,
                                     hex32(actual), hex32(stored)));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return Status::error(fmt::format("{}: not valid JSON", path));
  if (Status s = manifest_from_json(path, j, m); !s) return s;
  int64_t dir_step;
  if (is_step_dir_name(fs::path(step_dir).filename().string(), &dir_step) && dir_step != m.step)
    return Status::error(fmt::format("{}: step {} but the folder is {}", path, m.step, step_name(dir_step)));
  return Status::ok();
}

Status ckpt_verify(const std::string& step_dir) {
  CkptManifest m;
  if (Status s = verify_structure(step_dir, m); !s) return s;
  std::vector<char> buf;
  for (const auto& f : m.files) {
    std::string p = (fs::path(step_dir) / f.name).string();
    uint32_t crc = 0;
    if (Status s = crc_of_file(p, 0, -1, buf, crc); !s) return s;
    if (crc == f.crc32c) continue;
    std::string where = f.name.ends_with(".safetensors") ? "in the safetensors header" : "";
    for (const auto& t : m.tensors) {
      if (t.file != f.name) continue;
      uint32_t tc = 0;
      if (Status s = crc_of_file(p, t.offset, t.bytes, buf, tc); !s) return s;
      if (tc != t.crc32c) {
        where = fmt::format("in tensor {} (bytes {}..{})", t.name, t.offset, t.offset + t.bytes);
        break;
      }
    }
    return Status::error(fmt::format("{}: CRC32C {} but manifest.json says {}: corrupted{}{}", p, hex32(crc),
                                     hex32(f.crc32c), where.empty() ? "" : " ", where));
  }
  return Status::ok();
}

std::vector<CkptListEntry> ckpt_list(const std::string& run_dir) {
  std::vector<CkptListEntry> out;
  for (const auto& d : scan_steps(run_dir)) {
    CkptListEntry e;
    e.dir = d.dir;
    e.step = d.step;
    std::error_code ec;
    for (const auto& f : fs::directory_iterator(d.dir, ec))
      if (f.is_regular_file(ec)) e.bytes += static_cast<int64_t>(f.file_size(ec));
    Status s = ckpt_verify(d.dir);
    e.valid = s.is_ok();
    e.problem = s.message();
    out.push_back(std::move(e));
  }
  return out;
}

Status ckpt_find_latest(const std::string& run_dir, std::string& step_dir, std::vector<std::string>* warnings) {
  restore_replaced(ckpt_root(run_dir));
  for (const auto& d : scan_steps(run_dir)) {
    Status s = ckpt_verify(d.dir);
    if (s) {
      step_dir = d.dir;
      return Status::ok();
    }
    std::string w = fmt::format("{}: skipped, not valid: {}", d.dir, s.message());
    if (warnings)
      warnings->push_back(w);
    else
      spdlog::warn("[ckpt] {}", w);
  }
  return Status::error(fmt::format("no valid checkpoint in {}", ckpt_root(run_dir)));
}

Status ckpt_retain(const std::string& run_dir, int keep_last, int64_t keep_every, std::vector<std::string>* removed) {
  std::vector<StepDir> steps = scan_steps(run_dir);  // newest first
  std::string newest_valid;
  for (const auto& d : steps) {
    CkptManifest m;
    if (verify_structure(d.dir, m)) {
      newest_valid = d.dir;
      break;
    }
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepDir& d = steps[i];
    bool keep = static_cast<int64_t>(i) < keep_last || (keep_every > 0 && d.step % keep_every == 0) ||
                d.dir == newest_valid;
    if (keep) continue;
    // rename first, so a crash mid-delete leaves a .tmp that the next save removes, never a
    // half-deleted step folder
    std::string del = d.dir + ".del.tmp";
    ActiveTmp deleting(del);  // a save on the writer thread meanwhile does not take it for a leftover
    if (std::rename(d.dir.c_str(), del.c_str()) != 0)
      return Status::error(fmt::format("{}: cannot remove: {}", d.dir, std::strerror(errno)));
    std::error_code ec;
    fs::remove_all(del, ec);
    if (ec) return Status::error(fmt::format("{}: cannot remove: {}", del, ec.message()));
    if (removed) removed->push_back(d.dir);
  }
  return Status::ok();
}

Status ckpt_load_tensor(const std::string& step_dir, const CkptManifest& m, const std::string& name, float* out,
                        int64_t count) {
  const CkptTensorInfo* t = m.find(name);
  if (!t) return Status::error(fmt::format("{}: no tensor {} in manifest.json", step_dir, name));
  if (t->bytes != count * 4)
    return Status::error(fmt::format("{}: tensor {} holds {} floats, the caller expects {}", step_dir, name,
                                     t->bytes / 4, count));
  std::string path = (fs::path(step_dir) / t->file).string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  char* p = reinterpret_cast<char*>(out);
  int64_t done = 0;
  while (done < t->bytes) {
    ssize_t r = ::pread(fd, p + done, static_cast<size_t>(t->bytes - done), t->offset + done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int err = errno;
      ::close(fd);
      return Status::error(fmt::format("{}: tensor {}: read at byte {} failed: {}", path, name, t->offset + done,
                                       r < 0 ? std::strerror(err) : "file ends early (truncated)"));
    }
    done += r;
  }
  ::close(fd);
  uint32_t crc = crc32c_update(0, out, static_cast<size_t>(t->bytes));
  if (crc != t->crc32c)
    return Status::error(fmt::format("{}: tensor {} (bytes {}..{}): CRC32C {} but manifest.json says {}: corrupted",
                                     path, name, t->offset, t->offset + t->bytes, hex32(crc), hex32(t->crc32c)));
  return Status::ok();
}

Status ckpt_resolve(const std::string& dir, std::string& step_dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status::error(fmt::format("{}: not a directory (want a checkpoint step directory RUN/checkpoints/step_N or "
                                     "a run directory RUN)", dir));
  if (fs::exists(fs::path(dir) / "manifest.json", ec)) {
    step_dir = dir;
    return Status::ok();
  }
  std::vector<std::string> warnings;
  Status s = ckpt_find_latest(dir, step_dir, &warnings);
  for (const auto& w : warnings) spdlog::warn("{}", w);
  if (!s) return Status::error(fmt::format("{}: no manifest.json here and {}", dir, s.message()));
  return Status::ok();
}

Status ckpt_model_config(const std::string& step_dir, const CkptManifest& m, ModelConfig& c) {
  toml::table root;
  try {
    root = toml::parse(m.config_toml);
  } catch (const toml::parse_error& e) {
    return Status::error(fmt::format("{}/manifest.json: config_toml line {}: {}", step_dir, e.source().begin.line,
                                     e.description()));
  }
  if (Status s = model_config_read(root, c); !s)
    return Status::error(fmt::format("{}/manifest.json config_toml: {}", step_dir, s.message()));
  return Status::ok();
}

Status ckpt_load_model(const std::string& step_dir, ModelConfig& cfg, std::vector<float>& params,
                       CkptManifest* manifest) {
  CkptManifest m;
  if (Status s = ckpt_read_manifest(step_dir, m); !s) return s;
  if (m.state.contains("lora"))
    return Status::error(fmt::format("{}: a LoRA run's checkpoint holds its adapters alone (the base is {}); smelt "
                                     "generate, serve and eval --tasks run it beside its base, smelt export "
                                     "--merge-lora merges them into it (docs/finetune.md)",
                                     step_dir, m.state["lora"].value("base", std::string("?"))));
  if (Status s = ckpt_model_config(step_dir, m, cfg); !s) return s;
  ParamLayout layout = param_layout(cfg);
  params.assign(static_cast<size_t>(layout.total), 0.0f);
  for (const auto& p : layout.tensors) {  // each stored whole or as boxes, in any rank's file
    if (Status s = ckpt_read_box(step_dir, m, p.name, p.rows, p.cols, CkptBox{0, 0, p.rows, p.cols},
                                 params.data() + p.offset);
        !s)
      return s;
  }
  if (manifest) *manifest = std::move(m);
  return Status::ok();
}

}  // namespace smelt
