// Checkpoints: round trip (layout, manifest fields, every tensor, the model through param_layout),
// damage (a flipped byte in a shard or the manifest, a truncated or deleted shard, a deleted
// manifest) named by ckpt_verify with find_latest falling back to the previous step, leftover
// .tmp folders, retention, re-saving a step (and a crash in the middle of it), the two-rank
// commit, and a full disk: a 2 MiB tmpfs mounted in a user+mount namespace (`unshare --user
// --map-root-user --mount`, used on this machine), or where that is not allowed, a child process
// with RLIMIT_FSIZE = 2 MiB and SIGXFSZ ignored (the test prints which).
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/params.hpp"
#include "test_files.hpp"
#include "test_small_fs.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

const char* kConfig =
    "[model]\nvocab_size = 32\nd_model = 16\nn_layers = 1\nn_heads = 2\nn_kv_heads = 2\nffn_hidden = 24\n"
    "max_seq_len = 16\ntie_embeddings = false\n\n[train]\nlr = 0.001\n";

// A model-shaped state whose values are obvious by construction: float i of the flat parameter
// buffer = seed + i * 0.001; the AdamW first moment is its negative.
struct State {
  ModelConfig cfg;
  ParamLayout layout;
  std::vector<float> params, m;
  std::vector<float> extra;  // sized by the caller: makes a checkpoint as big as a test needs
};

State make_state(float seed, int64_t extra_floats = 0) {
  State s;
  toml::table t = toml::parse(kConfig);
  EXPECT_TRUE(model_config_read(t, s.cfg).is_ok());
  s.layout = param_layout(s.cfg);
  s.params.resize(static_cast<size_t>(s.layout.total));
  s.m.resize(s.params.size());
  for (size_t i = 0; i < s.params.size(); ++i) {
    s.params[i] = seed + static_cast<float>(i) * 0.001f;
    s.m[i] = -s.params[i];
  }
  s.extra.resize(static_cast<size_t>(extra_floats));
  for (size_t i = 0; i < s.extra.size(); ++i) s.extra[i] = static_cast<float>(i % 1000);
  return s;
}

CkptSaveRequest make_request(const State& s, int64_t step, const std::string& tokenizer = "") {
  CkptSaveRequest r;
  r.step = step;
  r.config_toml = kConfig;
  r.tokenizer_path = tokenizer;
  r.state = {{"loader", {{"epoch", 1}, {"position", step * 8}}}, {"rng", "12345"}, {"lr", 0.001}};
  for (const auto& p : s.layout.tensors) {
    std::vector<int64_t> shape = p.cols == 1 ? std::vector<int64_t>{p.rows} : std::vector<int64_t>{p.rows, p.cols};
    r.tensors.push_back({p.name, shape, s.params.data() + p.offset});
    r.tensors.push_back({"optim.m." + p.name, shape, s.m.data() + p.offset});
  }
  if (!s.extra.empty()) r.tensors.push_back({"extra", {static_cast<int64_t>(s.extra.size())}, s.extra.data()});
  return r;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_ckpt_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    run_ = (dir_ / "run").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  void save(const State& s, int64_t step, const std::string& tok = "") {
    Status st = ckpt_save(run_, make_request(s, step, tok));
    ASSERT_TRUE(st.is_ok()) << st.message();
  }
  std::string latest() { return test::read_file(run_ + "/checkpoints/latest"); }
  fs::path dir_;
  std::string run_;
};

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

}  // namespace

TEST_F(CheckpointTest, RoundTripLayoutManifestTensorsAndModel) {
  std::string tok = (dir_ / "tokenizer.json").string();
  test::write_file(tok, "{\"model\": {\"type\": \"BPE\"}}");
  State s = make_state(1.0f);
  CkptSaveStats stats;
  ASSERT_TRUE(ckpt_save(run_, make_request(s, 100, tok), &stats).is_ok());
  std::string d = ckpt_step_dir(run_, 100);
  EXPECT_EQ(d, run_ + "/checkpoints/step_00000100");
  EXPECT_EQ(stats.dir, d);
  EXPECT_GT(stats.bytes, static_cast<int64_t>(s.params.size() * 8));
  for (const char* f : {"rank-00000.safetensors", "manifest.json", "config.toml", "tokenizer.json"})
    EXPECT_TRUE(fs::exists(fs::path(d) / f)) << f;
  EXPECT_FALSE(fs::exists(d + ".tmp"));
  EXPECT_EQ(latest(), "step_00000100\n");
  EXPECT_EQ(test::read_file(d + "/config.toml"), kConfig);
  Status v = ckpt_verify(d);
  EXPECT_TRUE(v.is_ok()) << v.message();

  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(d, m).is_ok());
  EXPECT_EQ(m.version, 1);
  EXPECT_EQ(m.step, 100);
  EXPECT_EQ(m.ranks, 1);
  EXPECT_EQ(m.config_toml, kConfig);
  EXPECT_EQ(m.tokenizer_hash, fmt::format("{:016x}", hash64(test::read_file(tok))));
  EXPECT_EQ(m.state["loader"]["position"], 800);
  EXPECT_EQ(m.state["rng"], "12345");
  EXPECT_EQ(m.files.size(), 3u);
  EXPECT_EQ(m.tensors.size(), 2 * s.layout.tensors.size());
  for (const auto& p : s.layout.tensors) {
    std::vector<float> back(static_cast<size_t>(p.size()));
    ASSERT_TRUE(ckpt_load_tensor(d, m, "optim.m." + p.name, back.data(), p.size()).is_ok());
    for (int64_t i = 0; i < p.size(); ++i) ASSERT_EQ(back[i], s.m[p.offset + i]) << p.name;
  }
  std::vector<float> one(3);
  EXPECT_FALSE(ckpt_load_tensor(d, m, "model.norm.weight", one.data(), 3).is_ok());  // wrong count
  EXPECT_FALSE(ckpt_load_tensor(d, m, "no.such.tensor", one.data(), 3).is_ok());

  ModelConfig cfg;
  std::vector<float> params;
  Status lm = ckpt_load_model(d, cfg, params);
  ASSERT_TRUE(lm.is_ok()) << lm.message();
  EXPECT_EQ(cfg.d_model, 16);
  EXPECT_FALSE(cfg.tie_embeddings);
  EXPECT_EQ(params, s.params);

  std::string found;
  ASSERT_TRUE(ckpt_find_latest(run_, found).is_ok());
  EXPECT_EQ(found, d);
}

// Tensors given by `fill` (the imports write a tensor at a time): the same file bytes as the same
// values given by data, each fill called once in order with a buffer of its tensor's size; a fill
// that fails fails the save, leaving no step folder and `latest` as it was.
TEST_F(CheckpointTest, FillTensorsAreWrittenOneAtATimeAndTheirErrorFailsTheSave) {
  State s = make_state(2.0f);
  ASSERT_TRUE(ckpt_save(run_, make_request(s, 1)).is_ok());
  CkptSaveRequest r = make_request(s, 2);
  std::vector<std::string> called;
  for (CkptTensorRef& t : r.tensors) {
    const float* src = t.data;
    const size_t n = (size_t)(t.shape.size() == 1 ? t.shape[0] : t.shape[0] * t.shape[1]);
    t.data = nullptr;
    t.fill = [&called, src, n, name = t.name](float* out) {
      called.push_back(name);
      std::copy(src, src + n, out);
      return Status::ok();
    };
  }
  ASSERT_TRUE(ckpt_save(run_, r).is_ok());
  ASSERT_EQ(called.size(), r.tensors.size());
  for (size_t i = 0; i < called.size(); i++) EXPECT_EQ(called[i], r.tensors[i].name);
  ASSERT_TRUE(ckpt_save(run_, make_request(s, 3)).is_ok());  // the same values by data
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(ckpt_step_dir(run_, 2), m).is_ok());
  const size_t data = (size_t)m.tensors.front().offset;  // past the header, which names the step
  EXPECT_EQ(test::read_file(ckpt_step_dir(run_, 2) + "/rank-00000.safetensors").substr(data),
            test::read_file(ckpt_step_dir(run_, 3) + "/rank-00000.safetensors").substr(data));
  ModelConfig cfg;
  std::vector<float> params;
  ASSERT_TRUE(ckpt_load_model(ckpt_step_dir(run_, 2), cfg, params).is_ok());
  EXPECT_EQ(params, s.params);

  r.step = 4;
  r.tensors[3].fill = [](float*) { return Status::error("source.safetensors: read failed at byte 12"); };
  Status st = ckpt_save(run_, r);
  ASSERT_FALSE(st.is_ok());
  EXPECT_TRUE(contains(st.message(), "source.safetensors: read failed at byte 12")) << st.message();
  EXPECT_FALSE(fs::exists(ckpt_step_dir(run_, 4)));
  EXPECT_FALSE(fs::exists(ckpt_step_dir(run_, 4) + ".tmp"));
  EXPECT_EQ(latest(), "step_00000003\n");
}

TEST_F(CheckpointTest, TiedEmbeddingsHaveNoLmHead) {
  std::string cfg_text = std::string(kConfig);
  cfg_text.replace(cfg_text.find("tie_embeddings = false"), 22, "tie_embeddings = true");
  State s = make_state(2.0f);
  toml::table t = toml::parse(cfg_text);
  ASSERT_TRUE(model_config_read(t, s.cfg).is_ok());
  s.layout = param_layout(s.cfg);
  s.params.resize(static_cast<size_t>(s.layout.total));
  s.m.resize(s.params.size());
  CkptSaveRequest r = make_request(s, 5);
  r.config_toml = cfg_text;
  for (const auto& x : r.tensors) ASSERT_NE(x.name, "lm_head.weight");
  ASSERT_TRUE(ckpt_save(run_, r).is_ok());
  ModelConfig cfg;
  std::vector<float> params;
  Status st = ckpt_load_model(ckpt_step_dir(run_, 5), cfg, params);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_TRUE(cfg.tie_embeddings);
  EXPECT_EQ(params, s.params);
}

TEST_F(CheckpointTest, DamageIsNamedAndFindLatestFallsBack) {
  State a = make_state(1.0f), b = make_state(2.0f);
  save(a, 100);
  std::string good = ckpt_step_dir(run_, 100), bad = ckpt_step_dir(run_, 200);
  std::string shard = "rank-00000.safetensors";
  CkptManifest m;
  struct Case {
    std::string what;
    std::function<void()> damage;
    std::vector<std::string> expect;  // substrings of the verify message
  };
  std::vector<Case> cases = {
      {"flipped byte in a tensor",
       [&] {
         CkptManifest mm;
         ASSERT_TRUE(ckpt_read_manifest(bad, mm).is_ok());
         const CkptTensorInfo* t = mm.find("model.layers.0.mlp.up_proj.weight");
         ASSERT_NE(t, nullptr);
         std::string p = bad + "/" + shard, bytes = test::read_file(p);
         bytes[static_cast<size_t>(t->offset + 17)] ^= 0x01;
         test::write_file(p, bytes);
       },
       {shard, "CRC32C", "corrupted", "model.layers.0.mlp.up_proj.weight"}},
      {"truncated shard",
       [&] { fs::resize_file(bad + "/" + shard, fs::file_size(bad + "/" + shard) - 100); },
       {shard, "truncated"}},
      {"deleted shard", [&] { fs::remove(bad + "/" + shard); }, {shard, "missing"}},
      {"deleted manifest", [&] { fs::remove(bad + "/manifest.json"); }, {"manifest.json", "missing"}},
      {"flipped byte in the manifest's state",
       [&] {
         std::string p = bad + "/manifest.json", t = test::read_file(p);
         size_t at = t.find("\"position\": 1600");
         ASSERT_NE(at, std::string::npos);
         t[at + 13] = '7';  // 1600 -> 1700: still valid JSON
         test::write_file(p, t);
       },
       {"manifest.json", "corrupted"}},
      {"deleted config.toml", [&] { fs::remove(bad + "/config.toml"); }, {"config.toml", "missing"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    save(b, 200);
    ASSERT_TRUE(ckpt_verify(bad).is_ok());
    c.damage();
    Status v = ckpt_verify(bad);
    ASSERT_FALSE(v.is_ok());
    for (const auto& e : c.expect) EXPECT_TRUE(contains(v.message(), e)) << v.message();
    std::string found;
    std::vector<std::string> warnings;
    ASSERT_TRUE(ckpt_find_latest(run_, found, &warnings).is_ok());
    EXPECT_EQ(found, good);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_TRUE(contains(warnings[0], "step_00000200")) << warnings[0];
    EXPECT_TRUE(contains(warnings[0], c.expect[0])) << warnings[0];
    auto list = ckpt_list(run_);
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0].step, 200);
    EXPECT_FALSE(list[0].valid);
    EXPECT_EQ(list[0].problem, v.message());
    EXPECT_TRUE(list[1].valid);
  }
  // a damaged tensor is refused on load too, even without a verify first
  save(b, 200);
  ASSERT_TRUE(ckpt_read_manifest(bad, m).is_ok());
  const CkptTensorInfo* t = m.find("model.norm.weight");
  std::string p = bad + "/" + shard, bytes = test::read_file(p);
  bytes[static_cast<size_t>(t->offset)] ^= 0x40;
  test::write_file(p, bytes);
  std::vector<float> out(static_cast<size_t>(t->bytes / 4));
  Status ls = ckpt_load_tensor(bad, m, "model.norm.weight", out.data(), t->bytes / 4);
  EXPECT_FALSE(ls.is_ok());
  EXPECT_TRUE(contains(ls.message(), "model.norm.weight") && contains(ls.message(), "corrupted")) << ls.message();
  // nothing valid at all
  fs::remove(good + "/manifest.json");
  std::string found;
  std::vector<std::string> warnings;
  Status none = ckpt_find_latest(run_, found, &warnings);
  EXPECT_FALSE(none.is_ok());
  EXPECT_TRUE(contains(none.message(), "no valid checkpoint")) << none.message();
  EXPECT_EQ(warnings.size(), 2u);
}

TEST_F(CheckpointTest, LeftoverTmpIsIgnoredThenRemoved) {
  State s = make_state(1.0f);
  save(s, 100);
  fs::path junk = fs::path(run_) / "checkpoints" / "step_00000200.tmp";
  fs::create_directories(junk);
  test::write_file((junk / "rank-00000.safetensors").string(), "half a file");
  auto list = ckpt_list(run_);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].step, 100);
  std::string found;
  std::vector<std::string> warnings;
  ASSERT_TRUE(ckpt_find_latest(run_, found, &warnings).is_ok());
  EXPECT_EQ(found, ckpt_step_dir(run_, 100));
  EXPECT_TRUE(warnings.empty());
  save(s, 300);
  EXPECT_FALSE(fs::exists(junk));
  EXPECT_EQ(latest(), "step_00000300\n");
}

TEST_F(CheckpointTest, ResavingAStepReplacesIt) {
  State a = make_state(1.0f), b = make_state(5.0f);
  save(a, 100);
  save(b, 100);
  ModelConfig cfg;
  std::vector<float> params;
  ASSERT_TRUE(ckpt_load_model(ckpt_step_dir(run_, 100), cfg, params).is_ok());
  EXPECT_EQ(params, b.params);
  for (const auto& e : fs::directory_iterator(fs::path(run_) / "checkpoints"))
    EXPECT_FALSE(contains(e.path().filename().string(), ".tmp")) << e.path();
}

TEST_F(CheckpointTest, CrashWhileReSavingAStepKeepsTheOlderCopy) {
  State a = make_state(1.0f);
  save(a, 100);
  // the state a crash between "move the old step_100 aside" and "rename the new one in" leaves
  std::string d = ckpt_step_dir(run_, 100);
  fs::rename(d, d + ".old.tmp");
  fs::create_directories(d + ".tmp");
  test::write_file(d + ".tmp/rank-00000.safetensors", "half");
  std::string found;
  ASSERT_TRUE(ckpt_find_latest(run_, found).is_ok());
  EXPECT_EQ(found, d);
  EXPECT_FALSE(fs::exists(d + ".old.tmp"));
  save(a, 200);  // and the next save clears the half-written one
  EXPECT_FALSE(fs::exists(d + ".tmp"));
  EXPECT_TRUE(ckpt_verify(d).is_ok());
}

TEST_F(CheckpointTest, RetentionKeepsLastEveryMthAndNewestValid) {
  State s = make_state(1.0f);
  for (int step = 10; step <= 100; step += 10) save(s, step);
  std::vector<std::string> removed;
  ASSERT_TRUE(ckpt_retain(run_, 3, 40, &removed).is_ok());
  std::vector<int64_t> left;
  for (const auto& e : ckpt_list(run_)) left.push_back(e.step);
  EXPECT_EQ(left, (std::vector<int64_t>{100, 90, 80, 40}));
  EXPECT_EQ(removed.size(), 6u);
  // the two newest broken: keep_last = 2 keeps them, and the newest valid (80) survives too
  fs::remove(ckpt_step_dir(run_, 100) + "/manifest.json");
  fs::remove(ckpt_step_dir(run_, 90) + "/rank-00000.safetensors");
  ASSERT_TRUE(ckpt_retain(run_, 2, 0).is_ok());
  left.clear();
  for (const auto& e : ckpt_list(run_)) left.push_back(e.step);
  EXPECT_EQ(left, (std::vector<int64_t>{100, 90, 80}));
  ASSERT_TRUE(ckpt_retain(run_, 0, 0).is_ok());
  left.clear();
  for (const auto& e : ckpt_list(run_)) left.push_back(e.step);
  EXPECT_EQ(left, (std::vector<int64_t>{80}));
}

TEST_F(CheckpointTest, TwoRanksWriteTheirPartsAndRankZeroCommits) {
  State s = make_state(3.0f);
  CkptSaveRequest full = make_request(s, 50);
  CkptSaveRequest r0 = full, r1 = full;
  r0.ranks = r1.ranks = 2;
  r1.rank = 1;
  r0.tensors.clear();
  r1.tensors.clear();
  for (size_t i = 0; i < full.tensors.size(); ++i) (i % 2 ? r1 : r0).tensors.push_back(full.tensors[i]);
  ASSERT_TRUE(ckpt_save(run_, r1).is_ok());
  // rank 1 done, rank 0 not: a commit now fails, names rank 0, and leaves nothing behind
  Status early = ckpt_commit(run_, 50, 2);
  EXPECT_FALSE(early.is_ok());
  EXPECT_TRUE(contains(early.message(), "rank 0")) << early.message();
  EXPECT_FALSE(fs::exists(ckpt_step_dir(run_, 50) + ".tmp"));

  ASSERT_TRUE(ckpt_save(run_, r1).is_ok());
  ASSERT_TRUE(ckpt_save(run_, r0).is_ok());
  EXPECT_FALSE(fs::exists(ckpt_step_dir(run_, 50)));  // nothing is committed before ckpt_commit
  Status c = ckpt_commit(run_, 50, 2);
  ASSERT_TRUE(c.is_ok()) << c.message();
  std::string d = ckpt_step_dir(run_, 50);
  ASSERT_TRUE(ckpt_verify(d).is_ok());
  EXPECT_FALSE(fs::exists(d + "/rank-00001.json"));
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(d, m).is_ok());
  EXPECT_EQ(m.ranks, 2);
  EXPECT_EQ(m.find("model.embed_tokens.weight")->file, "rank-00000.safetensors");  // tensor 0: rank 0
  EXPECT_EQ(m.find("optim.m.model.embed_tokens.weight")->file, "rank-00001.safetensors");
  ModelConfig cfg;
  std::vector<float> params;
  ASSERT_TRUE(ckpt_load_model(d, cfg, params).is_ok());
  EXPECT_EQ(params, s.params);
  EXPECT_EQ(latest(), "step_00000050\n");
  // ranks = 2 but rank 1's shard deleted: not valid
  fs::remove(d + "/rank-00001.safetensors");
  EXPECT_TRUE(contains(ckpt_verify(d).message(), "rank-00001.safetensors"));
}

// ---- disk full -------------------------------------------------------------------------------

namespace {

// Runs in a process whose disk holds 2 MiB: a small checkpoint fits, a 4 MiB one cannot.
// Returns "" when every expectation holds, else what failed.
std::string disk_full_scenario(const std::string& run, const std::string& expect_errno_text) {
  State small = make_state(1.0f, 64 * 1024), big = make_state(2.0f, 1024 * 1024);
  Status s = ckpt_save(run, make_request(small, 1));
  if (!s) return "first save failed: " + s.message();
  std::string latest_before = test::read_file(run + "/checkpoints/latest");
  s = ckpt_save(run, make_request(big, 2));
  if (s) return "the 4 MiB save succeeded on a 2 MiB disk";
  if (!contains(s.message(), "rank-00000.safetensors") || !contains(s.message(), expect_errno_text))
    return "message does not name the file and the error: " + s.message();
  std::fprintf(stderr, "disk full message: %s\n", s.message().c_str());
  if (Status v = ckpt_verify(ckpt_step_dir(run, 1)); !v) return "previous checkpoint damaged: " + v.message();
  if (test::read_file(run + "/checkpoints/latest") != latest_before) return "latest changed";
  for (const auto& e : fs::directory_iterator(fs::path(run) / "checkpoints"))
    if (e.path().filename().string() != "latest" && e.path().filename().string() != "step_00000001")
      return "left behind: " + e.path().string();
  s = ckpt_save(run, make_request(small, 3));  // the space came back
  if (!s) return "a small save after the failure failed: " + s.message();
  return "";
}

}  // namespace

// The half that runs inside the namespace (or the rlimited child); skipped in a normal run.
TEST(CkptDiskFullChildOnly, InsideSmallFilesystem) {
  const char* dir = std::getenv("SMELT_CKPT_DISKFULL_DIR");
  if (!dir) GTEST_SKIP() << "runs only inside CheckpointTest.DiskFullFailsCleanly";
  std::string err = disk_full_scenario(std::string(dir) + "/run", "No space left on device");
  EXPECT_EQ(err, "");
}

TEST_F(CheckpointTest, DiskFullFailsCleanly) {
  fs::path mnt = dir_ / "mnt";
  fs::create_directories(mnt);
  bool can_unshare = !std::getenv("SMELT_CKPT_NO_UNSHARE") &&  // set it to test the fallback
                     test::small_fs_available();
  if (can_unshare) {
    std::string out;
    int st = test::run_in_small_fs(mnt.string(), "SMELT_CKPT_DISKFULL_DIR", "CkptDiskFullChildOnly.InsideSmallFilesystem",
                                   (dir_ / "helper.txt").string(), out);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
    EXPECT_TRUE(contains(out, "[  PASSED  ] 1 test")) << out;
    EXPECT_TRUE(contains(out, "No space left on device")) << out;
    return;
  }
  // fallback: the file-size limit makes write(2) fail with EFBIG ("File too large")
  std::printf("unshare not allowed here: using RLIMIT_FSIZE in a child process\n");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{2 << 20, 2 << 20};
    setrlimit(RLIMIT_FSIZE, &lim);
    std::string err = disk_full_scenario((mnt / "run").string(), "File too large");
    if (!err.empty()) std::fprintf(stderr, "%s\n", err.c_str());
    _exit(err.empty() ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
