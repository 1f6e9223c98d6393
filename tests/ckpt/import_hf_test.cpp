// Import of Hugging Face checkpoints (ckpt/import_hf.hpp), against an independent writer and forward:
// tests/reference/hf_family.py writes a folder of each family (published configs scaled down, the
// fixture tokenizers of tests/tokenizer/tok_test_util.hpp, F32/F16/BF16, sharded or not); Smelt
// imports it, and its training forward (fp32) on real English and Chinese text (GPL-3, a Debian
// fortune) must give the next-token log-probabilities hf_family.py's float64 forward of the HF
// modelling code gives, within 1e-4 absolute (fp32 through two layers measures ~1e-6; a wrong RoPE
// scaling, bias or norm is O(0.1)), and its bf16 forward within kImportBf16MeanKl of mean KL; then
// export_hf of the import gives back the source's values.
// Also every refusal, on small folders written here, and the F16/BF16 conversions bit for bit.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/export_hf.hpp"
#include "smelt/ckpt/import_hf.hpp"
#include "smelt/ckpt/safetensors.hpp"
#include "smelt/model/params.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "smtn.hpp"
#include "test_references.hpp"
#include "tokenizer/tok_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

const char* kPython = "/usr/bin/python3";

std::string hf_family_py() { return std::string(SMELT_SOURCE_DIR) + "/tests/reference/hf_family.py"; }

bool torch_available() {
  return ::access(kPython, X_OK) == 0 &&
         std::system((std::string(kPython) + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0;
}

int run(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Real text: the GPL-3's preamble and a Chinese Debian fortune (its ANSI colours removed).
std::string english_text() { return test::read_file("/usr/share/common-licenses/GPL-3").substr(0, 4000); }
std::string chinese_text() {
  std::string s = test::read_file("/usr/share/games/fortunes/chinese.u8");
  s = std::regex_replace(s, std::regex("\x1b\\[[0-9;]*m"), "");
  return s.substr(0, 4000);
}

// ---- small folders written here, for the refusals ----

// A safetensors file of the given tensors (dtype per tensor; values arbitrary but deterministic).
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
};
void write_safetensors(const std::string& path, const std::vector<RawTensor>& ts) {
  json h = json::object();
  int64_t off = 0;
  std::string data;
  for (const auto& t : ts) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const int es = t.dtype == "F64" ? 8 : t.dtype == "F32" ? 4 : (t.dtype == "F16" || t.dtype == "BF16") ? 2 : 1;
    for (int64_t i = 0; i < n; i++) {
      const float v = 0.01f * (float)((i * 7 + t.name.size()) % 23) - 0.1f;
      if (es == 4) data.append((const char*)&v, 4);
      else if (es == 8) { double d = v; data.append((const char*)&d, 8); }
      else if (es == 2) { uint32_t b; std::memcpy(&b, &v, 4); uint16_t x = (uint16_t)(b >> 16); data.append((const char*)&x, 2); }
      else data += (char)(i % 5);
    }
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + n * es}}};
    off += n * es;
  }
  std::string hs = h.dump();
  hs.append((8 - hs.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary);
  uint64_t n = hs.size();
  f.write((const char*)&n, 8);
  f << hs << data;
}

// A 1-layer Llama: V 64, C 16, 2 heads, FFN 32 (tied).
json tiny_config() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 16},
          {"intermediate_size", 32}, {"num_attention_heads", 2}, {"num_key_value_heads", 2},
          {"num_hidden_layers", 1}, {"vocab_size", 64}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
          {"max_position_embeddings", 128}, {"tie_word_embeddings", true}, {"hidden_act", "silu"},
          {"attention_bias", false}, {"mlp_bias", false}};
}
std::vector<RawTensor> tiny_tensors(const std::string& dtype = "F32") {
  std::vector<RawTensor> ts = {{"model.embed_tokens.weight", dtype, {64, 16}}, {"model.norm.weight", dtype, {16}}};
  const std::string p = "model.layers.0.";
  for (const char* n : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                        "self_attn.o_proj.weight"})
    ts.push_back({p + n, dtype, {16, 16}});
  ts.push_back({p + "mlp.gate_proj.weight", dtype, {32, 16}});
  ts.push_back({p + "mlp.up_proj.weight", dtype, {32, 16}});
  ts.push_back({p + "mlp.down_proj.weight", dtype, {16, 32}});
  ts.push_back({p + "input_layernorm.weight", dtype, {16}});
  ts.push_back({p + "post_attention_layernorm.weight", dtype, {16}});
  return ts;
}

class ImportHf : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_import_hf_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A tiny folder: config (after edit), tensors (after edit), no tokenizer.
  std::string tiny(const std::string& name, const json& cfg, const std::vector<RawTensor>& ts) {
    fs::path d = dir_ / name;
    fs::create_directories(d);
    test::write_file((d / "config.json").string(), cfg.dump(2));
    write_safetensors((d / "model.safetensors").string(), ts);
    return d.string();
  }
  Status config_of(const json& cfg, HfModelInfo& info, int max_seq_len = 4096) {
    return import_hf_config(tiny("c" + std::to_string(n_++), cfg, tiny_tensors()), max_seq_len, info);
  }
  Status weights_of(const std::vector<RawTensor>& ts, std::string* dir = nullptr, const json& cfg = tiny_config()) {
    std::string d = tiny("w" + std::to_string(n_++), cfg, ts);
    if (dir) *dir = d;
    HfModelInfo info;
    if (Status s = import_hf_config(d, 4096, info); !s) return s;
    std::vector<float> params;
    return import_hf_weights(d, info.config, params);
  }

  fs::path dir_;
  int n_ = 0;
};

void expect_error(const Status& s, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(s) << "expected a refusal";
  for (const char* p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' in: " << s.message();
}

}  // namespace

TEST(ImportHfConvert, F16AndBf16ToF32BitForBit) {
  for (uint32_t h = 0; h < 65536; h++) {
    const uint32_t e = (h >> 10) & 31, m = h & 1023;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    const float got = import_f16_to_f32((uint16_t)h);
    if (e == 31) {
      if (m == 0) EXPECT_EQ(got, sign * INFINITY) << h;
      else EXPECT_TRUE(std::isnan(got)) << h;
      continue;
    }
    const double want = e == 0 ? sign * std::ldexp((double)m, -24) : sign * std::ldexp(1.0 + m / 1024.0, (int)e - 15);
    ASSERT_EQ((double)got, want) << "half 0x" << std::hex << h;
    if (h == 0x8000) {
      EXPECT_TRUE(std::signbit(got));
    }
  }
  for (uint32_t b : {0x0000u, 0x3f80u, 0xbf80u, 0x7f80u, 0x0001u, 0x4049u}) {
    uint32_t bits = b << 16;
    float want;
    std::memcpy(&want, &bits, 4);
    EXPECT_EQ(import_bf16_to_f32((uint16_t)b), want);
  }
}

TEST_F(ImportHf, ConfigMapsEachFamilyAndRefusesWhatSmeltWouldComputeDifferently) {
  HfModelInfo info;
  json c = tiny_config();
  ASSERT_TRUE(config_of(c, info, 100));
  EXPECT_EQ(info.architecture, "LlamaForCausalLM");
  EXPECT_EQ(info.config.max_seq_len, 100);  // min(max_position_embeddings 128, 100)
  EXPECT_EQ(info.config.head_dim, 0);
  EXPECT_TRUE(info.config.tie_embeddings);
  c.erase("tie_word_embeddings");  // the HF classes' default: untied
  ASSERT_TRUE(config_of(c, info));
  EXPECT_FALSE(info.config.tie_embeddings);
  EXPECT_EQ(info.config.max_seq_len, 128);

  c = tiny_config();
  c["architectures"] = {"Qwen2ForCausalLM"};
  c["attention_bias"] = true;  // not a Qwen2 key: its q/k/v always have biases, o_proj never
  ASSERT_TRUE(config_of(c, info));
  EXPECT_TRUE(info.config.qkv_bias);
  c["architectures"] = {"Qwen3ForCausalLM"};
  c["attention_bias"] = false;
  c["head_dim"] = 16;
  ASSERT_TRUE(config_of(c, info));
  EXPECT_TRUE(info.config.qk_norm);
  EXPECT_EQ(info.config.head_dim, 16);
  c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  ASSERT_TRUE(config_of(c, info));
  EXPECT_EQ(info.config.rope_scaling, RopeScaling::kLlama3);
  EXPECT_EQ(info.config.rope_original_max_seq_len, 64);
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  ASSERT_TRUE(config_of(c, info));
  EXPECT_EQ(info.config.rope_scaling, RopeScaling::kLinear);
  EXPECT_EQ(info.config.rope_factor, 2.0);

  auto refused = [&](json cfg, std::initializer_list<const char*> parts) {
    HfModelInfo i;
    SCOPED_TRACE(cfg.dump());
    expect_error(config_of(cfg, i), parts);
  };
  c = tiny_config();
  c["architectures"] = {"GPT2LMHeadModel"};
  refused(c, {"config.json", "architectures", "GPT2LMHeadModel"});
  c = tiny_config();
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}};
  refused(c, {"config.json", "LlamaForCausalLM", "rope_type", "yarn"});
  c["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  refused(c, {"config.json", "type", "dynamic"});
  c = tiny_config();
  c["mlp_bias"] = true;
  refused(c, {"config.json", "LlamaForCausalLM", "mlp_bias"});
  c = tiny_config();
  c["attention_bias"] = true;
  refused(c, {"config.json", "attention_bias", "o_proj"});
  c = tiny_config();
  c["hidden_act"] = "gelu";
  refused(c, {"config.json", "hidden_act", "gelu"});
  c = tiny_config();
  c["architectures"] = {"MistralForCausalLM"};
  c["sliding_window"] = 64;  // shorter than the 128 imported
  refused(c, {"config.json", "MistralForCausalLM", "sliding_window", "--max-seq-len 64"});
  ASSERT_TRUE(config_of(c, info, 64));  // never acts within 64 tokens
  c = tiny_config();
  c["architectures"] = {"Qwen2ForCausalLM"};
  c["use_sliding_window"] = true;
  c["sliding_window"] = 32;
  refused(c, {"config.json", "use_sliding_window"});
  c = tiny_config();
  c["quantization_config"] = {{"quant_method", "gptq"}};
  refused(c, {"config.json", "quantization_config"});
  c = tiny_config();
  c.erase("hidden_size");
  refused(c, {"config.json", "hidden_size is missing"});
  c = tiny_config();
  c["num_attention_heads"] = "two";
  refused(c, {"config.json", "num_attention_heads", "integer"});
}

TEST_F(ImportHf, WeightsRefusedByTensorNamingFileDtypeAndShape) {
  ASSERT_TRUE(weights_of(tiny_tensors()));
  ASSERT_TRUE(weights_of(tiny_tensors("BF16")));
  ASSERT_TRUE(weights_of(tiny_tensors("F16")));

  auto ts = tiny_tensors();
  ts.erase(ts.begin() + 7);  // mlp.up_proj
  expect_error(weights_of(ts), {"model.safetensors", "no tensor model.layers.0.mlp.up_proj.weight"});
  ts = tiny_tensors();
  ts[2].shape = {16, 17};  // q_proj
  expect_error(weights_of(ts), {"model.safetensors", "model.layers.0.self_attn.q_proj.weight", "[16, 17]", "[16, 16]"});
  ts = tiny_tensors();
  ts[3].dtype = "F64";
  expect_error(weights_of(ts), {"model.safetensors", "model.layers.0.self_attn.k_proj.weight", "F64"});
  ts = tiny_tensors();
  ts[4].dtype = "I8";
  expect_error(weights_of(ts), {"model.safetensors", "model.layers.0.self_attn.v_proj.weight", "I8"});
  ts = tiny_tensors();
  ts.push_back({"model.layers.0.self_attn.o_proj.bias", "F32", {16}});
  expect_error(weights_of(ts), {"model.safetensors", "model.layers.0.self_attn.o_proj.bias", "not a parameter"});

  // Buffers are ignored; a tied head equal to the embedding is ignored, a different one refused.
  ts = tiny_tensors();
  ts.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {8}});
  ts.push_back({"lm_head.weight", "F32", {64, 16}});  // the writer's values differ from the embedding's
  std::string d;
  Status s = weights_of(ts, &d);
  expect_error(s, {"model.safetensors", "tie_word_embeddings = true", "lm_head.weight differs"});
  // Same bytes as the embedding: copy its header entry's data range.
  {
    SafetensorsReader r;
    ASSERT_TRUE(r.open(d + "/model.safetensors"));
    const SafetensorsTensor* e = r.find("model.embed_tokens.weight");
    std::vector<float> emb(64 * 16);
    ASSERT_TRUE(r.read_at(e->begin, emb.data(), 4 * (int64_t)emb.size()));
    const SafetensorsTensor* h = r.find("lm_head.weight");
    std::fstream f(d + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(h->begin);
    f.write((const char*)emb.data(), 4 * emb.size());
  }
  HfModelInfo info;
  ASSERT_TRUE(import_hf_config(d, 4096, info));
  std::vector<float> params;
  HfWeightStats st;
  ASSERT_TRUE(import_hf_weights(d, info.config, params, &st));
  EXPECT_EQ(st.ignored.size(), 2u);
  EXPECT_EQ(st.tensors, 11);
  EXPECT_EQ(st.dtypes.at("F32"), 11);

  // An untied config needs its head.
  json untied = tiny_config();
  untied["tie_word_embeddings"] = false;
  expect_error(weights_of(tiny_tensors(), nullptr, untied), {"no tensor lm_head.weight", "untied"});

  // Shards: the index must agree with the files.
  fs::path sd = dir_ / "sharded";
  fs::create_directories(sd);
  test::write_file((sd / "config.json").string(), tiny_config().dump());
  auto all = tiny_tensors();
  std::vector<RawTensor> a(all.begin(), all.begin() + 5), b(all.begin() + 5, all.end());
  write_safetensors((sd / "model-00001-of-00002.safetensors").string(), a);
  write_safetensors((sd / "model-00002-of-00002.safetensors").string(), b);
  json wm = json::object();
  for (const auto& t : a) wm[t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : b) wm[t.name] = "model-00002-of-00002.safetensors";
  test::write_file((sd / "model.safetensors.index.json").string(), json{{"weight_map", wm}}.dump());
  ASSERT_TRUE(import_hf_config(sd.string(), 4096, info));
  ASSERT_TRUE(import_hf_weights(sd.string(), info.config, params, &st));
  EXPECT_EQ(st.shards, 2);
  wm["model.norm.weight"] = "model-00002-of-00002.safetensors";  // it is in shard 1
  test::write_file((sd / "model.safetensors.index.json").string(), json{{"weight_map", wm}}.dump());
  expect_error(import_hf_weights(sd.string(), info.config, params), {"model.safetensors.index.json",
                                                                      "model.norm.weight", "model-00002-of-00002"});
}

TEST_F(ImportHf, RefusesAFullCheckpointsFolderAndLeavesNothingOnFailure) {
  SMELT_REQUIRE_REFERENCE(test::refs_installed(), "npm references (the fixture tokenizers): scripts/install-deps");
  // A tiny folder with a tokenizer that fits: the gpt2 fixture has 50257 ids.
  json c = tiny_config();
  c["vocab_size"] = 50304;
  auto ts = tiny_tensors();
  ts[0].shape = {50304, 16};
  std::string d = tiny("src", c, ts);
  fs::copy_file(test::fixtures() + "/gpt2.json", d + "/tokenizer.json");
  const std::string run_dir = (dir_ / "run").string();

  // A missing tensor: refused, and no run folder is left.
  fs::path bad = dir_ / "bad";
  fs::create_directories(bad);
  for (const char* f : {"config.json", "tokenizer.json"}) fs::copy_file(fs::path(d) / f, bad / f);
  auto missing = ts;
  missing.pop_back();
  write_safetensors((bad / "model.safetensors").string(), missing);
  HfImportResult r;
  HfImportOptions o;
  o.hf_dir = bad.string();
  o.run_dir = run_dir;
  expect_error(import_hf(o, r), {"no tensor model.layers.0.post_attention_layernorm.weight"});
  EXPECT_FALSE(fs::exists(run_dir));

  o.hf_dir = d;
  ASSERT_TRUE(import_hf(o, r)) << "";
  EXPECT_EQ(r.step_dir, run_dir + "/checkpoints/step_00000000");
  EXPECT_TRUE(ckpt_verify(r.step_dir));
  EXPECT_EQ(r.import_state.at("architecture"), "LlamaForCausalLM");
  // Again: refused without --force, the checkpoint untouched.
  expect_error(import_hf(o, r), {"checkpoints: not empty", "--force"});
  // A newer step from a run: --force replaces it, so step 0 is the latest.
  fs::create_directories(run_dir + "/checkpoints/step_00000100");
  o.force = true;
  ASSERT_TRUE(import_hf(o, r));
  EXPECT_EQ(r.removed.size(), 1u);
  EXPECT_FALSE(fs::exists(run_dir + "/checkpoints/step_00000100"));
  std::string latest;
  ASSERT_TRUE(ckpt_find_latest(run_dir, latest));
  EXPECT_EQ(fs::path(latest).filename(), "step_00000000");

  // A tokenizer Smelt cannot load: its reason and the way out.
  test::write_file(d + "/tokenizer.json", R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})");
  o.run_dir = (dir_ / "run2").string();
  Status s = import_hf(o, r);
  expect_error(s, {"tokenizer.json", "--tokenizer FILE"});
  EXPECT_FALSE(fs::exists(o.run_dir));
  // The vocabulary must fit.
  o.tokenizer_path = test::fixtures() + "/llama3.json";  // 100k ids > 50304
  expect_error(import_hf(o, r), {"tokenizer vocabulary", "vocab_size 50304"});
}

// ---- the families, against hf_family.py ----

struct FamilyCase {
  const char* family;
  const char* dtype;
  int shards;
  const char* tokenizer;  // fixture file
  int vocab;              // 0: the tokenizer's, rounded up to 64
};

void PrintTo(const FamilyCase& c, std::ostream* os) {
  *os << c.family << " " << c.dtype << " " << c.shards << " shard(s), " << c.tokenizer;
}

class ImportHfFamily : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(ImportHfFamily, LogprobsMatchTheHfForwardOnRealTextAndExportGivesTheSourceBack) {
  SMELT_REQUIRE_REFERENCE(torch_available(), "python3-torch for /usr/bin/python3: scripts/install-deps");
  SMELT_REQUIRE_REFERENCE(fs::exists(hf_family_py()), "tests/reference/hf_family.py");
  SMELT_REQUIRE_REFERENCE(test::refs_installed(), "npm references (the fixture tokenizers): scripts/install-deps");
  SMELT_REQUIRE_REFERENCE(fs::exists("/usr/share/common-licenses/GPL-3") &&
                              fs::exists("/usr/share/games/fortunes/chinese.u8"),
                          "base-files and fortunes-zh (the English and Chinese text): scripts/install-deps");
  const FamilyCase& fc = GetParam();
  spdlog::set_level(spdlog::level::warn);  // (Model::init's memory plan, twice per case)
  fs::path dir = fs::temp_directory_path() /
                 fmt::format("smelt_import_family_{}_{}_{}", getpid(), fc.family, fc.dtype);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string hf = (dir / "hf").string(), run_dir = (dir / "run").string();
  ASSERT_EQ(run(fmt::format("{} {} write {} --family {} --dtype {} --shards {} --seed 7 --tokenizer {}{}", kPython,
                            hf_family_py(), hf, fc.family, fc.dtype, fc.shards, test::fixtures() + "/" + fc.tokenizer,
                            fc.vocab ? fmt::format(" --vocab {}", fc.vocab) : std::string())),
            0);

  HfImportOptions o;
  o.hf_dir = hf;
  o.run_dir = run_dir;
  HfImportResult r;
  Status s = import_hf(o, r);
  ASSERT_TRUE(s) << s.message();
  const json src_cfg = json::parse(test::read_file(hf + "/config.json"));
  const ModelConfig& c = r.info.config;
  EXPECT_EQ(c.vocab_size, src_cfg["vocab_size"].get<int>());
  EXPECT_EQ(r.weights.shards, fc.shards);
  const std::string st_dtype = std::string(fc.dtype) == "fp32" ? "F32" : std::string(fc.dtype) == "fp16" ? "F16" : "BF16";
  EXPECT_EQ(r.weights.dtypes.size(), 1u);
  EXPECT_EQ(r.weights.dtypes[st_dtype], r.weights.tensors);
  // The tokenizer's settings went into the checkpoint's state.
  CkptManifest m;
  ASSERT_TRUE(ckpt_read_manifest(r.step_dir, m));
  const json& imp = m.state.at("import");
  const json tc = json::parse(test::read_file(hf + "/tokenizer_config.json"));
  EXPECT_EQ(imp.at("chat_template"), tc.at("chat_template"));
  EXPECT_EQ(imp.at("eos_token_id"), src_cfg.at("eos_token_id"));
  EXPECT_EQ(imp.at("generation_config"), json::parse(test::read_file(hf + "/generation_config.json")));
  EXPECT_TRUE(fs::exists(r.step_dir + "/tokenizer.json"));

  // Log-probabilities on real text: both rows of 64 tokens, one reference run.
  ModelConfig lc;
  std::vector<float> params;
  ASSERT_TRUE(ckpt_load_model(r.step_dir, lc, params));
  Tokenizer tok;
  ASSERT_TRUE(Tokenizer::load(r.step_dir + "/tokenizer.json", tok));
  const int T = 64;
  std::vector<std::vector<int32_t>> rows;
  for (const std::string& text : {english_text(), chinese_text()}) {
    std::vector<uint32_t> ids;
    tok.encode(text, ids, false);
    ASSERT_GE(ids.size(), (size_t)T);
    rows.emplace_back(ids.begin(), ids.begin() + T);
  }
  test::Tensor in;
  in.dims = {2, T};
  for (const auto& row : rows) in.i.insert(in.i.end(), row.begin(), row.end());
  const std::string in_path = (dir / "in.smtn").string(), out_path = (dir / "out.smtn").string();
  test::write_smtn(in_path, {{"tokens", in}});
  ASSERT_EQ(run(fmt::format("{} {} logprobs {} {} {}", kPython, hf_family_py(), hf, in_path, out_path)), 0);
  test::TensorMap ref = test::read_smtn(out_path);
  const int64_t V = c.vocab_size;
  ASSERT_EQ(ref["logprobs"].dims, (std::vector<int64_t>{2, T, V}));
  const char* names[2] = {"english", "chinese"};
  Model model;
  ASSERT_TRUE(import_model_init(model, lc, std::move(params), T, 2));
  double fp32_max[2] = {0, 0};
  for (int b = 0; b < 2; b++) {
    std::vector<float> ours;
    ASSERT_TRUE(import_logprobs(model, rows[b], ours));
    LogprobDiff d = import_compare_logprobs(ref["logprobs"].f.data() + (int64_t)b * T * V, ours.data(), T, V, rows[b]);
    std::printf("[import] %s %s %d shard%s, %s text: max |Δ logprob| %.3g (max |ref logprob| %.3g), mean KL %.3g, "
                "NLL ref %.4f smelt %.4f\n",
                fc.family, fc.dtype, fc.shards, fc.shards == 1 ? "" : "s", names[b], d.max_abs, d.ref_max_abs,
                d.mean_kl, d.ref_nll, d.our_nll);
    EXPECT_FALSE(d.nan);
    EXPECT_LT(d.max_abs, 1e-4) << names[b];
    fp32_max[b] = d.max_abs;
    EXPECT_LT(std::fabs(d.mean_kl), 1e-7) << names[b];  // (KL of float32 log-probs: rounding may make it < 0)
  }
  // bf16 (the linear layers' inputs rounded to bf16, as training runs them): within the stated KL.
  ASSERT_TRUE(ckpt_load_model(r.step_dir, lc, params));
  Model model16;
  ASSERT_TRUE(import_model_init(model16, lc, std::move(params), T, 2, Precision::kBf16));
  for (int b = 0; b < 2; b++) {
    std::vector<float> ours;
    ASSERT_TRUE(import_logprobs(model16, rows[b], ours));
    LogprobDiff d = import_compare_logprobs(ref["logprobs"].f.data() + (int64_t)b * T * V, ours.data(), T, V, rows[b]);
    std::printf("[import] %s %s, %s text, bf16: mean KL %.3g (tolerance %.3g), max |Δ logprob| %.3g, NLL ref %.4f "
                "smelt %.4f\n", fc.family, fc.dtype, names[b], d.mean_kl, kImportBf16MeanKl, d.max_abs, d.ref_nll,
                d.our_nll);
    EXPECT_FALSE(d.nan);
    EXPECT_LE(d.mean_kl, kImportBf16MeanKl) << names[b];
    EXPECT_GT(d.max_abs, fp32_max[b]) << names[b] << ": the bf16 forward rounds; it is further off than fp32";
  }

  // The round trip: export_hf of the import holds the source's values (F32) and its model keys.
  const std::string out = (dir / "export").string();
  s = export_hf(r.step_dir, out, "");
  ASSERT_TRUE(s) << s.message();
  std::vector<float> src;
  ASSERT_TRUE(import_hf_weights(hf, c, src));
  SafetensorsReader er;
  ASSERT_TRUE(er.open(out + "/model.safetensors"));
  const ParamLayout layout = param_layout(c);
  EXPECT_EQ(er.tensors().size(), layout.tensors.size());
  for (const auto& t : layout.tensors) {
    const SafetensorsTensor* x = er.find(t.name);
    ASSERT_NE(x, nullptr) << t.name;
    ASSERT_EQ(x->dtype, "F32") << t.name;
    std::vector<float> v((size_t)t.size());
    ASSERT_TRUE(er.read_at(x->begin, v.data(), 4 * t.size()));
    ASSERT_EQ(std::memcmp(v.data(), src.data() + t.offset, 4 * t.size()), 0) << t.name;
  }
  const json ec = json::parse(test::read_file(out + "/config.json"));
  // Mistral without a sliding window is Llama: the export names the class that computes the same.
  EXPECT_EQ(ec.value("architectures", json()), src_cfg["architectures"][0] == "MistralForCausalLM"
                                                   ? json{"LlamaForCausalLM"} : src_cfg["architectures"]);
  for (const char* k : {"hidden_size", "intermediate_size", "num_attention_heads",
                        "num_key_value_heads", "num_hidden_layers", "vocab_size", "rms_norm_eps", "rope_theta",
                        "tie_word_embeddings", "hidden_act"})
    EXPECT_EQ(ec.value(k, json()), src_cfg.value(k, json())) << k;
  const int hs = src_cfg.contains("head_dim") ? src_cfg["head_dim"].get<int>()
                                              : src_cfg["hidden_size"].get<int>() / src_cfg["num_attention_heads"].get<int>();
  EXPECT_EQ(ec.value("head_dim", ec["hidden_size"].get<int>() / ec["num_attention_heads"].get<int>()), hs);
  EXPECT_EQ(ec.value("max_position_embeddings", 0), std::min(4096, src_cfg["max_position_embeddings"].get<int>()));
  const json& rs = src_cfg.value("rope_scaling", json());
  if (rs.is_object()) {
    ASSERT_TRUE(ec.contains("rope_scaling") && ec["rope_scaling"].is_object()) << ec.dump();
    for (const auto& [k, v] : rs.items()) EXPECT_EQ(ec["rope_scaling"].value(k, json()), v) << "rope_scaling." << k;
  } else {
    EXPECT_TRUE(!ec.contains("rope_scaling") || ec["rope_scaling"].is_null() ||
                ec["rope_scaling"].value("rope_type", "") == "default");
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Families, ImportHfFamily,
    ::testing::Values(FamilyCase{"smollm2", "fp32", 1, "qwen2.json", 0},
                      FamilyCase{"llama3.2", "bf16", 3, "llama3.json", 0},
                      FamilyCase{"mistral", "fp16", 1, "llama3.json", 0},
                      FamilyCase{"qwen2.5", "bf16", 1, "qwen2.json", 0},
                      FamilyCase{"qwen3", "fp32", 2, "qwen2.json", 0},
                      FamilyCase{"llama3-untied-big-vocab", "fp32", 1, "llama3.json", 256000}),
    [](const ::testing::TestParamInfo<FamilyCase>& i) {
      std::string n = std::string(i.param.family) + "_" + i.param.dtype;
      for (char& ch : n)
        if (!std::isalnum((unsigned char)ch)) ch = '_';
      return n;
    });
