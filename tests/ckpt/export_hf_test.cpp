// `smelt export --format hf` (ckpt/export_hf.hpp): random tiny checkpoints (GQA + tied head, MQA +
// untied) exported through the binary with --check, then read by an independent reader
// (tests/reference/hf_export_check.py: safetensors parsed from the spec, the LlamaForCausalLM
// tensor set and shapes checked, logits from llama_ref.py's float64 forward) whose logits match
// Smelt's Model::forward; --check catches a corrupted export; peak RSS of the export process stays
// near the largest tensor, far below the model; usage errors exit 2, failures 1.
//
// Logits tolerance: max|c++ - torch| / max|torch| <= 1e-4, as in tests/model/model_test.cpp (fp32
// vs float64 through ~20 ops measures ~1e-6; a wrong RoPE pairing or swapped tensor is O(1)).
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/tiny_checkpoint.hpp"
#include "smelt/ckpt/export_hf.hpp"
#include "smelt/model/params.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

// SMTN (tests/reference/llama_ref.py): one i32 tensor out, f32 tensors back.
void write_inputs(const std::string& path, const std::vector<int32_t>& ids, int64_t B, int64_t T) {
  std::ofstream f(path, std::ios::binary);
  auto u32 = [&](uint32_t v) { f.write((const char*)&v, 4); };
  f.write("SMTN", 4);
  u32(1);
  u32(1);
  std::string name = "inputs";
  u32((uint32_t)name.size());
  f.write(name.data(), name.size());
  uint8_t dtype = 1, ndim = 2;
  f.write((const char*)&dtype, 1);
  f.write((const char*)&ndim, 1);
  f.write((const char*)&B, 8);
  f.write((const char*)&T, 8);
  f.write((const char*)ids.data(), 4 * ids.size());
}

std::vector<float> read_logits(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4];
  uint32_t version = 0, count = 0, n = 0;
  f.read(magic, 4);
  f.read((char*)&version, 4);
  f.read((char*)&count, 4);
  f.read((char*)&n, 4);
  std::string name(n, '\0');
  f.read(name.data(), n);
  uint8_t dtype = 0, ndim = 0;
  f.read((char*)&dtype, 1);
  f.read((char*)&ndim, 1);
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) {
    int64_t d;
    f.read((char*)&d, 8);
    numel *= d;
  }
  EXPECT_TRUE(f && std::memcmp(magic, "SMTN", 4) == 0 && name == "logits" && dtype == 0) << path;
  std::vector<float> out(numel);
  f.read((char*)out.data(), 4 * numel);
  return out;
}

class ExportHf : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_export_hf_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tok_path_ = (dir_ / "tokenizer.json").string();
    ASSERT_TRUE(test::train_tiny_tokenizer(tok_path_, 300));
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string tok_path_;
};

ModelConfig tiny(int NKV, bool tied) {
  ModelConfig c;
  c.vocab_size = 320;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = NKV;
  c.ffn_hidden = 64;
  c.max_seq_len = 48;
  c.rope_theta = 500000.0;  // not the default, so a config.json that drops it is caught
  c.tie_embeddings = tied;
  c.init_std = 0.2;
  return c;
}

void export_and_compare(const fs::path& dir, const std::string& tok_path, const ModelConfig& c,
                        const std::string& tag) {
  Model m;
  ASSERT_TRUE(m.init(c, 2, 24, 1, 31));
  const std::string run = (dir / ("run_" + tag)).string(), out = (dir / ("hf_" + tag)).string();
  Status s = test::save_tiny_checkpoint(m, run, 3, tok_path);
  ASSERT_TRUE(s) << s.message();
  test::CmdResult r = test::run_smelt("export --checkpoint " + run + " --format hf --output " + out + " --check --json",
                                      dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["check"], "passed");
  EXPECT_EQ(j["check_max_abs_diff"].get<double>(), 0.0);
  EXPECT_TRUE(fs::exists(fs::path(out) / "model.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(out) / "model.safetensors.tmp"));

  auto cfg = nlohmann::json::parse([&] {
    std::ifstream f(fs::path(out) / "config.json");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }());
  EXPECT_EQ(cfg["num_key_value_heads"], c.n_kv_heads);
  EXPECT_EQ(cfg["tie_word_embeddings"], c.tie_embeddings);
  EXPECT_EQ(cfg["rope_theta"].get<double>(), c.rope_theta);
  EXPECT_EQ(cfg["max_position_embeddings"], c.max_seq_len);
  EXPECT_EQ(cfg["eos_token_id"], 0);  // <|endoftext|> is id 0 of the trained tokenizer
  Tokenizer a, b;
  ASSERT_TRUE(Tokenizer::load(tok_path, a));
  ASSERT_TRUE(Tokenizer::load((fs::path(out) / "tokenizer.json").string(), b));
  EXPECT_EQ(a.content_hash(), b.content_hash());
  auto tc = nlohmann::json::parse([&] {
    std::ifstream f(fs::path(out) / "tokenizer_config.json");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }());
  EXPECT_EQ(tc["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(tc["eos_token"], "<|endoftext|>");

  // A fixed batch through Smelt and through the independent reader of the export.
  Batch batch;
  batch.B = 2;
  batch.T = 24;
  for (int n = 0; n < 48; n++) {
    batch.inputs.push_back((n * 89 + 7) % c.vocab_size);
    batch.targets.push_back(-1);
  }
  float loss;
  ASSERT_TRUE(m.forward(batch, loss));
  const std::string in = (dir / ("in_" + tag)).string(), res = (dir / ("out_" + tag)).string();
  write_inputs(in, batch.inputs, 2, 24);
  std::string cmd = std::string("/usr/bin/python3 ") + SMELT_SOURCE_DIR + "/tests/reference/hf_export_check.py " +
                    out + " " + in + " " + res;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<float> ref = read_logits(res);
  ASSERT_EQ(ref.size(), (size_t)48 * c.vocab_size);
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < ref.size(); i++) {
    scale = std::max(scale, (double)std::fabs(ref[i]));
    err = std::max(err, (double)std::fabs(m.acts().logits[i] - ref[i]));
  }
  std::printf("[%s] logits vs independent reader: rel err %.2e\n", tag.c_str(), err / scale);
  EXPECT_LE(err / scale, 1e-4);
}

TEST_F(ExportHf, GqaTiedMatchesIndependentReader) { export_and_compare(dir_, tok_path_, tiny(2, true), "gqa_tied"); }
TEST_F(ExportHf, MqaUntiedMatchesIndependentReader) {
  export_and_compare(dir_, tok_path_, tiny(1, false), "mqa_untied");
}

TEST_F(ExportHf, CheckCatchesACorruptedExport) {
  Model m;
  ModelConfig c = tiny(2, false);
  ASSERT_TRUE(m.init(c, 1, 8, 1, 5));
  const std::string run = (dir_ / "run").string(), out = (dir_ / "hf").string();
  ASSERT_TRUE(test::save_tiny_checkpoint(m, run, 1, tok_path_));
  const std::string step = ckpt_step_dir(run, 1);
  HfExportStats st;
  Status s = export_hf(step, out, "", &st);
  ASSERT_TRUE(s) << s.message();
  ASSERT_TRUE(export_hf_check(step, out));
  // One float of the last tensor (lm_head.weight, untied) changed in place.
  {
    std::fstream f(fs::path(out) / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    float v = 3.0f;
    f.write((const char*)&v, 4);
  }
  double diff = 0;
  s = export_hf_check(step, out, &diff);
  EXPECT_FALSE(s);
  EXPECT_GT(diff, 0.0);
  EXPECT_NE(s.message().find("logits"), std::string::npos) << s.message();
}

// Peak RSS (VmHWM of the smelt process after exec, from its --json summary), MiB.
double export_peak_mib(const std::string& args, const fs::path& dir) {
  test::CmdResult r = test::run_smelt("export --json " + args, dir);
  EXPECT_EQ(r.rc, 0) << r.err;
  if (r.rc != 0) return -1;
  return nlohmann::json::parse(r.out)["peak_rss_bytes"].get<double>() / 1048576.0;
}

TEST_F(ExportHf, PeakMemoryStaysNearTheLargestTensor) {
  // ~94 MB of parameters whose largest tensor is 8 MB (embedding and head, 8192 x 256).
  ModelConfig c;
  c.vocab_size = 8192;
  c.d_model = 256;
  c.n_layers = 24;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.ffn_hidden = 704;
  c.max_seq_len = 64;
  c.tie_embeddings = false;
  ParamLayout layout = param_layout(c);
  std::vector<float> params((size_t)layout.total);
  for (size_t i = 0; i < params.size(); i++) params[i] = (float)((int)((i * 2654435761u) % 1001) - 500) * 1e-5f;
  const std::string run = (dir_ / "big").string();
  // the tokenizer as the baseline's: both runs load and write the same one
  ASSERT_TRUE(test::save_checkpoint_params(c, params.data(), run, 1, tok_path_));
  const double model_mib = layout.total * 4.0 / 1048576.0, largest_mib = 8192.0 * 256 * 4 / 1048576.0;
  params = {};

  // Baseline: the same binary exporting a 0.2 MB model.
  Model tiny_m;
  ASSERT_TRUE(tiny_m.init(tiny(2, true), 1, 8, 1, 1));
  ASSERT_TRUE(test::save_tiny_checkpoint(tiny_m, (dir_ / "small").string(), 1, tok_path_));
  const double base = export_peak_mib("--checkpoint " + (dir_ / "small").string() + " --output " +
                                          (dir_ / "hf_small").string(), dir_);
  const double peak = export_peak_mib("--checkpoint " + run + " --output " + (dir_ / "hf_big").string(), dir_);
  ASSERT_GT(base, 0);
  ASSERT_GT(peak, 0);
  const double extra_mib = peak - base;
  std::printf("model %.1f MiB, largest tensor %.1f MiB; export peak RSS %.1f MiB (baseline %.1f MiB, +%.1f MiB)\n",
              model_mib, largest_mib, peak, base, extra_mib);
  EXPECT_GT((int64_t)fs::file_size(dir_ / "hf_big" / "model.safetensors"), layout.total * 4);
  // One tensor buffer plus I/O slack; holding the whole model would add ~94 MiB.
  EXPECT_LT(extra_mib, 2.5 * largest_mib);
  EXPECT_LT(extra_mib, 0.3 * model_mib);
}

TEST_F(ExportHf, UsageErrorsExitTwoFailuresExitOne) {
  EXPECT_EQ(test::run_smelt("export --checkpoint x --output y --format onnx", dir_).rc, 2);
  EXPECT_EQ(test::run_smelt("export --checkpoint x", dir_).rc, 2);  // no --output
  test::CmdResult r = test::run_smelt("export --checkpoint " + (dir_ / "none").string() + " --output " +
                                          (dir_ / "o").string(), dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("none"), std::string::npos) << r.err;
}

}  // namespace
