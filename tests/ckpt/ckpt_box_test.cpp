// Tensors stored as boxes (ckpt/ckpt_box.cpp): box names round trip; ckpt_flat_boxes covers exactly
// a flat range of a slice; ckpt_read_box reassembles any box of a full tensor (v[r][c] = r * 1000 + c,
// so every value names its place) from checkpoints written by ckpt_save under different layouts —
// whole, row slices, column slices, overlapping slices, 2x2 boxes over two ranks' files, ZeRO-style
// flat pieces — and fails on missing coverage or a misshapen box; a box it does not need is never
// read; ckpt_load_model, export_hf and `smelt ckpt verify` take box-stored parameters.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <toml++/toml.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/export_hf.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/params.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// A full tensor and boxes cut from it, saved through ckpt_save as they would be by the ranks of a
// parallel layout.
struct Full {
  std::string name;
  int64_t rows, cols;  // cols = 1: a 1-D tensor
  std::vector<float> v;
  float at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

Full make_full(const std::string& name, int64_t rows, int64_t cols) {
  Full f{name, rows, cols, std::vector<float>(static_cast<size_t>(rows * cols))};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) f.v[static_cast<size_t>(r * cols + c)] = static_cast<float>(r * 1000 + c);
  return f;
}

std::vector<float> cut(const Full& f, const CkptBox& b) {
  std::vector<float> out;
  for (int64_t r = b.r0; r < b.r0 + b.rows; ++r)
    for (int64_t c = b.c0; c < b.c0 + b.cols; ++c) out.push_back(f.at(r, c));
  return out;
}

std::vector<int64_t> stored_shape(const Full& f, const CkptBox& b) {
  return f.cols > 1 ? std::vector<int64_t>{b.rows, b.cols} : std::vector<int64_t>{b.rows};
}

// rows [r0, r1) x cols [c0, c1) of a 2-D tensor; elements [a, b) of a 1-D one.
CkptBox box2(int64_t r0, int64_t r1, int64_t c0, int64_t c1) { return {r0, c0, r1 - r0, c1 - c0}; }
CkptBox box1(int64_t a, int64_t b) { return {a, 0, b - a, 1}; }

// What one rank stores: boxes of full tensors (data owned here).
struct RankBoxes {
  std::vector<std::pair<const Full*, CkptBox>> boxes;
};

class CkptBoxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_ckpt_box_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Saves step 1 of a new run `tag`, rank r storing ranks[r]'s boxes; returns the step folder.
  std::string save(const std::string& tag, const std::vector<RankBoxes>& ranks) {
    std::string run = (dir_ / tag).string();
    int n = static_cast<int>(ranks.size());
    for (int r = 0; r < n; ++r) {
      CkptSaveRequest q;
      q.step = 1;
      q.rank = r;
      q.ranks = n;
      q.config_toml = "[model]\n";
      std::vector<std::vector<float>> data;
      data.reserve(ranks[r].boxes.size());
      for (const auto& [f, b] : ranks[r].boxes) {
        data.push_back(cut(*f, b));
        q.tensors.push_back({ckpt_box_name(f->name, b, f->rows, f->cols), stored_shape(*f, b), data.back().data()});
      }
      Status s = ckpt_save(run, q);
      EXPECT_TRUE(s.is_ok()) << s.message();
    }
    if (n > 1) {
      Status c = ckpt_commit(run, 1, n);
      EXPECT_TRUE(c.is_ok()) << c.message();
    }
    std::string d = ckpt_step_dir(run, 1);
    Status v = ckpt_verify(d);
    EXPECT_TRUE(v.is_ok()) << tag << ": " << v.message();
    return d;
  }

  // Reads `want` of f from d and compares every value.
  void expect_box(const std::string& d, const Full& f, const CkptBox& want, const std::string& tag) {
    CkptManifest m;
    ASSERT_TRUE(ckpt_read_manifest(d, m).is_ok());
    std::vector<float> out(static_cast<size_t>(want.rows * want.cols), -1.0f);
    Status s = ckpt_read_box(d, m, f.name, f.rows, f.cols, want, out.data());
    ASSERT_TRUE(s.is_ok()) << tag << ": " << s.message();
    EXPECT_EQ(out, cut(f, want)) << tag << ": " << ckpt_box_name(f.name, want, f.rows, f.cols);
  }

  fs::path dir_;
};

}  // namespace

TEST(CkptBoxName, RoundTripsAndWholeBoxIsThePlainName) {
  EXPECT_EQ(ckpt_box_name("w", {0, 0, 7, 10}, 7, 10), "w");
  EXPECT_EQ(ckpt_box_name("w", {0, 0, 13, 1}, 13, 1), "w");
  EXPECT_EQ(ckpt_box_name("w", {2, 0, 3, 10}, 7, 10), "w[2:5,0:10]");
  EXPECT_EQ(ckpt_box_name("w", {0, 4, 7, 6}, 7, 10), "w[0:7,4:10]");
  EXPECT_EQ(ckpt_box_name("model.norm.weight", {4, 0, 9, 1}, 13, 1), "model.norm.weight[4:13]");

  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    int64_t R = 1 + rng() % 50, C = 1 + rng() % 50;
    CkptBox b;
    b.r0 = rng() % R;
    b.rows = 1 + rng() % (R - b.r0);
    b.c0 = rng() % C;
    b.cols = 1 + rng() % (C - b.c0);
    std::string name = ckpt_box_name("model.layers.3.mlp.up_proj.weight", b, R, C);
    std::string base = "unchanged";
    CkptBox back{-1, -1, -1, -1};
    bool whole = b.r0 == 0 && b.c0 == 0 && b.rows == R && b.cols == C;
    ASSERT_EQ(ckpt_parse_box_name(name, base, back), !whole) << name;
    if (whole) {
      EXPECT_EQ(name, "model.layers.3.mlp.up_proj.weight");
      EXPECT_EQ(base, "unchanged");
      continue;
    }
    EXPECT_EQ(base, "model.layers.3.mlp.up_proj.weight");
    EXPECT_EQ(back.r0, b.r0) << name;
    EXPECT_EQ(back.rows, b.rows) << name;
    if (C > 1) {
      EXPECT_EQ(back.c0, b.c0) << name;
      EXPECT_EQ(back.cols, b.cols) << name;
    } else {
      EXPECT_EQ(back.c0, 0) << name;
      EXPECT_EQ(back.cols, 1) << name;
    }
  }
  std::string base;
  CkptBox b;
  for (const char* plain : {"w", "optim.m.w", "w[", "w[]", "[0:3]", "w[3:1]", "w[a:3]", "w[0:3,]", "w[0:3,1]",
                            "w[0:3]x", "w[-1:3]", "w[0:3,4:2]"})
    EXPECT_FALSE(ckpt_parse_box_name(plain, base, b)) << plain;
}

TEST(CkptFlatBoxes, CoverExactlyTheFlatRangeInOrder) {
  std::mt19937 rng(11);
  for (int it = 0; it < 3000; ++it) {
    CkptBox local;
    int64_t R = 1 + rng() % 20, C = 1 + rng() % 20;  // the full tensor
    local.r0 = rng() % R;
    local.rows = 1 + rng() % (R - local.r0);
    local.c0 = rng() % C;
    local.cols = 1 + rng() % (C - local.c0);
    int64_t n = local.rows * local.cols;
    int64_t a = rng() % (n + 1), b = rng() % (n + 1);
    if (a > b) std::swap(a, b);
    std::vector<CkptFlatBox> boxes = ckpt_flat_boxes(local, a, b);
    ASSERT_LE(boxes.size(), 3u);
    if (a == b) {
      ASSERT_TRUE(boxes.empty());
    }
    // Materialise: element k of the slice sits at full (local.r0 + k / cols, local.c0 + k % cols).
    std::vector<std::pair<int64_t, int64_t>> want, got;
    for (int64_t k = a; k < b; ++k) want.push_back({local.r0 + k / local.cols, local.c0 + k % local.cols});
    int64_t next = a;
    for (const auto& fb : boxes) {
      ASSERT_EQ(fb.offset, next) << "each box starts where the previous ended";
      ASSERT_GT(fb.box.rows * fb.box.cols, 0);
      ASSERT_TRUE(fb.box.rows == 1 || (fb.box.c0 == local.c0 && fb.box.cols == local.cols))
          << "a box of several rows spans the slice's columns (it is contiguous in the slice)";
      for (int64_t r = fb.box.r0; r < fb.box.r0 + fb.box.rows; ++r)
        for (int64_t c = fb.box.c0; c < fb.box.c0 + fb.box.cols; ++c) {
          got.push_back({r, c});
          // the flat offset of (r, c) in the slice is the box's offset plus its place in the box
          int64_t k = (r - local.r0) * local.cols + (c - local.c0);
          ASSERT_EQ(k, fb.offset + (r - fb.box.r0) * fb.box.cols + (c - fb.box.c0));
        }
      next += fb.box.rows * fb.box.cols;
    }
    ASSERT_EQ(got, want) << "slice rows " << local.rows << " cols " << local.cols << " range " << a << ".." << b;
  }
  EXPECT_TRUE(ckpt_flat_boxes({0, 0, 4, 5}, 7, 7).empty());
  // [3, 17) of a 4 x 5 slice: the rest of row 0, rows 1..2, the start of row 3
  std::vector<CkptFlatBox> three = ckpt_flat_boxes({10, 2, 4, 5}, 3, 17);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0].offset, 3);
  EXPECT_EQ(three[1].offset, 5);
  EXPECT_EQ(three[2].offset, 15);
  EXPECT_EQ(ckpt_box_name("w", three[0].box, 20, 20), "w[10:11,5:7]");
  EXPECT_EQ(ckpt_box_name("w", three[1].box, 20, 20), "w[11:13,2:7]");
  EXPECT_EQ(ckpt_box_name("w", three[2].box, 20, 20), "w[13:14,2:4]");
}

TEST_F(CkptBoxTest, ReadsAnyBoxUnderEveryStorageLayout) {
  const Full w = make_full("model.layers.0.mlp.up_proj.weight", 7, 10), g = make_full("model.norm.weight", 13, 1);

  // ZeRO-style: rank 0 holds rows [0, 3) whole; the row slice [3, 7) is cut flat at 7 and 29 of its
  // 40 values into pieces held by ranks 0, 1, 1; the vector is cut flat at 5.
  RankBoxes z0, z1;
  z0.boxes.push_back({&w, box2(0, 3, 0, 10)});
  const CkptBox slice = box2(3, 7, 0, 10);
  const std::tuple<int64_t, int64_t, int> pieces[] = {{0, 7, 0}, {7, 29, 1}, {29, 40, 1}};  // [a, b), rank
  for (auto [a, b, rank] : pieces)
    for (const auto& fb : ckpt_flat_boxes(slice, a, b)) (rank ? z1 : z0).boxes.push_back({&w, fb.box});
  for (const auto& fb : ckpt_flat_boxes(box1(0, 13), 0, 5)) z0.boxes.push_back({&g, fb.box});
  for (const auto& fb : ckpt_flat_boxes(box1(0, 13), 5, 13)) z1.boxes.push_back({&g, fb.box});
  ASSERT_GE(z1.boxes.size(), 3u);  // the cuts make partial rows, so this is not just row slices

  struct Layout {
    std::string tag;
    std::vector<RankBoxes> ranks;
  };
  std::vector<Layout> layouts = {
      {"whole", {{{{&w, box2(0, 7, 0, 10)}, {&g, box1(0, 13)}}}}},
      {"rows", {{{{&w, box2(0, 4, 0, 10)}, {&w, box2(4, 7, 0, 10)}, {&g, box1(0, 6)}, {&g, box1(6, 13)}}}}},
      {"cols", {{{{&w, box2(0, 7, 0, 3)}, {&w, box2(0, 7, 3, 10)}, {&g, box1(0, 13)}}}}},
      {"overlap", {{{{&w, box2(0, 5, 0, 10)}, {&w, box2(3, 7, 0, 10)}, {&w, box2(2, 6, 4, 8)}, {&g, box1(0, 9)}, {&g, box1(4, 13)}}}}},
      {"2x2_two_ranks",
       {{{{&w, box2(0, 3, 0, 6)}, {&w, box2(3, 7, 6, 10)}, {&g, box1(0, 7)}}}, {{{&w, box2(0, 3, 6, 10)}, {&w, box2(3, 7, 0, 6)}, {&g, box1(7, 13)}}}}},
      {"zero_flat", {z0, z1}},
  };
  const std::vector<CkptBox> wants = {box2(0, 7, 0, 10), box2(0, 7, 2, 5),  box2(1, 6, 0, 10), box2(2, 5, 1, 9),
                                      box2(6, 7, 9, 10), box2(3, 4, 0, 10), box2(0, 7, 9, 10), box2(2, 2, 0, 10)};
  const std::vector<CkptBox> gwants = {box1(0, 13), box1(3, 11), box1(12, 13), box1(5, 6)};
  for (const auto& l : layouts) {
    std::string d = save(l.tag, l.ranks);
    for (const auto& want : wants) expect_box(d, w, want, l.tag);
    for (const auto& want : gwants) expect_box(d, g, want, l.tag);
  }
  // the plain name is kept for the whole tensor, so today's checkpoints are what "whole" wrote
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(ckpt_step_dir((dir_ / "whole").string(), 1), m).is_ok());
  EXPECT_NE(m.find(w.name), nullptr);
  ASSERT_TRUE(ckpt_read_manifest(ckpt_step_dir((dir_ / "2x2_two_ranks").string(), 1), m).is_ok());
  ASSERT_NE(m.find(w.name + "[0:3,6:10]"), nullptr);
  EXPECT_EQ(m.find(w.name + "[0:3,6:10]")->file, "rank-00001.safetensors");
  EXPECT_EQ(m.find(w.name + "[0:3,6:10]")->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(m.find(g.name + "[7:13]")->shape, (std::vector<int64_t>{6}));
}

TEST_F(CkptBoxTest, MissingCoverageAndMisshapenBoxesFail) {
  const Full w = make_full("model.layers.1.self_attn.q_proj.weight", 8, 6);
  // rows [2, 4) of columns [3, 6) are stored by nobody (a rank's file that was never saved)
  std::string d = save("gap", {{{{&w, box2(0, 2, 0, 6)}, {&w, box2(2, 8, 0, 3)}, {&w, box2(4, 8, 3, 6)}}}});
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(d, m).is_ok());
  std::vector<float> out(48);
  Status s = ckpt_read_box(d, m, w.name, 8, 6, {0, 0, 8, 6}, out.data());
  ASSERT_FALSE(s.is_ok());
  EXPECT_TRUE(contains(s.message(), w.name)) << s.message();
  EXPECT_TRUE(contains(s.message(), d)) << s.message();
  EXPECT_TRUE(contains(s.message(), "rows [2, 4) x cols [3, 6)")) << s.message();
  EXPECT_TRUE(contains(s.message(), "cover 42 of the 48")) << s.message();
  // the covered part still reads
  expect_box(d, w, {0, 0, 2, 6}, "gap");
  expect_box(d, w, {2, 0, 6, 3}, "gap");
  Status none = ckpt_read_box(d, m, "model.no_such.weight", 8, 6, {0, 0, 8, 6}, out.data());
  ASSERT_FALSE(none.is_ok());
  EXPECT_TRUE(contains(none.message(), "model.no_such.weight")) << none.message();
  // a box outside the full tensor asked for
  EXPECT_FALSE(ckpt_read_box(d, m, w.name, 8, 6, {6, 0, 3, 6}, out.data()).is_ok());

  // a stored box whose shape disagrees with its name: rows [0, 4) x cols [0, 6) stored as [4, 5]
  std::string run = (dir_ / "misshapen").string();
  std::vector<float> data(24, 1.0f);
  CkptSaveRequest q;
  q.step = 1;
  q.config_toml = "[model]\n";
  q.tensors = {{w.name + "[0:4,0:6]", {4, 5}, data.data()}, {w.name + "[4:8,0:6]", {4, 6}, data.data()}};
  ASSERT_TRUE(ckpt_save(run, q).is_ok());
  ASSERT_TRUE(ckpt_read_manifest(ckpt_step_dir(run, 1), m).is_ok());
  Status bad = ckpt_read_box(ckpt_step_dir(run, 1), m, w.name, 8, 6, {4, 0, 4, 6}, out.data());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_TRUE(contains(bad.message(), w.name + "[0:4,0:6]")) << bad.message();
  EXPECT_TRUE(contains(bad.message(), "has shape [4, 5]")) << bad.message();
  // a whole tensor of another shape
  data.assign(48, 1.0f);
  q.step = 2;
  q.tensors = {{w.name, {6, 8}, data.data()}};
  ASSERT_TRUE(ckpt_save(run, q).is_ok());
  ASSERT_TRUE(ckpt_read_manifest(ckpt_step_dir(run, 2), m).is_ok());
  Status wrong = ckpt_read_box(ckpt_step_dir(run, 2), m, w.name, 8, 6, {0, 0, 8, 6}, out.data());
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_TRUE(contains(wrong.message(), "has shape [6, 8]")) << wrong.message();
  // a box reaching past the full tensor the caller knows (8 rows stored, 7 expected)
  q.step = 3;
  q.tensors = {{w.name + "[0:4,0:6]", {4, 6}, data.data()}, {w.name + "[4:8,0:6]", {4, 6}, data.data()}};
  ASSERT_TRUE(ckpt_save(run, q).is_ok());
  ASSERT_TRUE(ckpt_read_manifest(ckpt_step_dir(run, 3), m).is_ok());
  Status past = ckpt_read_box(ckpt_step_dir(run, 3), m, w.name, 7, 6, {0, 0, 2, 6}, out.data());
  ASSERT_FALSE(past.is_ok());
  EXPECT_TRUE(contains(past.message(), w.name + "[4:8,0:6]")) << past.message();
  EXPECT_TRUE(contains(past.message(), "lies outside")) << past.message();
}

TEST_F(CkptBoxTest, BoxesNotNeededAreNotRead) {
  const Full w = make_full("w", 6, 4);
  std::string d = save("unread", {{{{&w, CkptBox{0, 0, 3, 4}}, {&w, CkptBox{3, 0, 3, 4}}, {&w, CkptBox{0, 0, 6, 4}}}}});
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(d, m).is_ok());
  // damage the second box and the whole copy (listed last): rows [0, 3) need only the first box
  // (the second does not meet them, the whole copy adds nothing the first did not give)
  for (const char* name : {"w[3:6,0:4]", "w"}) {
    const CkptTensorInfo* t = m.find(name);
    ASSERT_NE(t, nullptr) << name;
    std::fstream f(fs::path(d) / t->file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(t->offset + 5);
    f.put('\x7f');
  }
  expect_box(d, w, {0, 0, 3, 4}, "rows 0..2 from the first box");
  std::vector<float> out(24);
  Status s = ckpt_read_box(d, m, "w", 6, 4, {0, 0, 6, 4}, out.data());
  ASSERT_FALSE(s.is_ok()) << "the damaged box is read (its CRC checked) once it is needed";
  EXPECT_TRUE(contains(s.message(), "w[3:6,0:4]")) << s.message();
  EXPECT_TRUE(contains(s.message(), "CRC32C")) << s.message();
}

namespace {

const char* kModelConfig =
    "[model]\nvocab_size = 32\nd_model = 16\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\nffn_hidden = 24\n"
    "max_seq_len = 16\ntie_embeddings = false\n";

// Saves params of cfg as step 3 of run: split = false, each tensor whole; true, every matrix as two
// row boxes (the upper in rank 0's file, the lower in rank 1's) and vectors whole in rank 0's.
Status save_params(const ModelConfig& cfg, const std::vector<float>& params, const std::string& run, bool split,
                   bool drop_one = false) {
  ParamLayout layout = param_layout(cfg);
  std::vector<CkptSaveRequest> q(split ? 2 : 1);
  for (size_t r = 0; r < q.size(); ++r) {
    q[r].step = 3;
    q[r].rank = static_cast<int>(r);
    q[r].ranks = static_cast<int>(q.size());
    q[r].config_toml = kModelConfig;
  }
  for (const auto& p : layout.tensors) {
    const float* data = params.data() + p.offset;
    if (p.cols == 1) {
      q[0].tensors.push_back({p.name, {p.rows}, data});
    } else if (!split) {
      q[0].tensors.push_back({p.name, {p.rows, p.cols}, data});
    } else {
      int64_t h = p.rows / 2 + 1;  // unequal halves
      q[0].tensors.push_back({ckpt_box_name(p.name, {0, 0, h, p.cols}, p.rows, p.cols), {h, p.cols}, data});
      if (drop_one && p.name == "model.layers.1.mlp.down_proj.weight") continue;
      q[1].tensors.push_back({ckpt_box_name(p.name, {h, 0, p.rows - h, p.cols}, p.rows, p.cols),
                              {p.rows - h, p.cols}, data + h * p.cols});
    }
  }
  for (const auto& r : q)
    if (Status s = ckpt_save(run, r); !s) return s;
  return split ? ckpt_commit(run, 3, 2) : Status::ok();
}

}  // namespace

TEST_F(CkptBoxTest, ModelLoadExportAndVerifyTakeBoxStoredParameters) {
  ModelConfig cfg;
  toml::table t = toml::parse(kModelConfig);
  ASSERT_TRUE(model_config_read(t, cfg).is_ok());
  ParamLayout layout = param_layout(cfg);
  std::vector<float> params(static_cast<size_t>(layout.total));
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.5f + static_cast<float>(i) * 0.25f;
  const std::string whole = (dir_ / "whole").string(), boxed = (dir_ / "boxed").string();
  ASSERT_TRUE(save_params(cfg, params, whole, false).is_ok());
  Status sb = save_params(cfg, params, boxed, true);
  ASSERT_TRUE(sb.is_ok()) << sb.message();
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(ckpt_step_dir(boxed, 3), m).is_ok());
  EXPECT_EQ(m.find("model.embed_tokens.weight"), nullptr);  // really stored as boxes only
  EXPECT_NE(m.find("model.embed_tokens.weight[0:17,0:16]"), nullptr);

  for (const std::string& run : {whole, boxed}) {
    ModelConfig c;
    std::vector<float> back;
    Status s = ckpt_load_model(ckpt_step_dir(run, 3), c, back);
    ASSERT_TRUE(s.is_ok()) << run << ": " << s.message();
    EXPECT_EQ(c.n_layers, 2);
    EXPECT_EQ(back, params) << run;
  }

  // export: the same model.safetensors byte for byte
  HfExportStats st;
  Status ew = export_hf(ckpt_step_dir(whole, 3), (dir_ / "hf_whole").string(), "", &st);
  ASSERT_TRUE(ew.is_ok()) << ew.message();
  Status eb = export_hf(ckpt_step_dir(boxed, 3), (dir_ / "hf_boxed").string(), "", &st);
  ASSERT_TRUE(eb.is_ok()) << eb.message();
  std::string a = test::read_file((dir_ / "hf_whole" / "model.safetensors").string());
  std::string b = test::read_file((dir_ / "hf_boxed" / "model.safetensors").string());
  EXPECT_GT(a.size(), params.size() * 4);
  EXPECT_TRUE(a == b) << "model.safetensors differs: " << a.size() << " vs " << b.size() << " bytes";

  // `smelt ckpt verify`: box names are just names
  std::string cmd = std::string(SMELT_BINARY) + " ckpt verify " + ckpt_step_dir(boxed, 3) + " 2>&1";
  int rc = 0;
  std::string out = test::run_command(cmd, rc);
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << out;
  EXPECT_TRUE(contains(out, "valid")) << out;

  // a missing box: load and export fail naming the tensor
  const std::string holed = (dir_ / "holed").string();
  ASSERT_TRUE(save_params(cfg, params, holed, true, true).is_ok());
  ModelConfig c;
  std::vector<float> back;
  Status s = ckpt_load_model(ckpt_step_dir(holed, 3), c, back);
  ASSERT_FALSE(s.is_ok());
  EXPECT_TRUE(contains(s.message(), "model.layers.1.mlp.down_proj.weight")) << s.message();
  Status e = export_hf(ckpt_step_dir(holed, 3), (dir_ / "hf_holed").string(), "", &st);
  ASSERT_FALSE(e.is_ok());
  EXPECT_TRUE(contains(e.message(), "model.layers.1.mlp.down_proj.weight")) << e.message();
  EXPECT_FALSE(fs::exists(dir_ / "hf_holed" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir_ / "hf_holed" / "model.safetensors.tmp"));
}
