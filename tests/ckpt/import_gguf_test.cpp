// import_gguf (src/smelt/ckpt/import_gguf.hpp) against three independent sides:
//  - our own export: a checkpoint exported as f32 / bf16 / f16 / q8_0 imports back to its weights
//    (f32 bit for bit, bf16 to the checkpoint's matrices rounded to bf16 and its norms bit for bit,
//    f16 / q8_0 to the values gguf_load_model dequantizes) and its tokenizer;
//  - tests/reference/gguf_convert.py, a GGUF writer from the spec and convert_hf_to_gguf.py's
//    conventions, on Hugging Face folders of tests/reference/hf_family.py (llama3.2: llama arch with
//    q/k permutation and rope_freqs.weight; qwen2.5: qwen2 arch with q/k/v biases; qwen3: qwen3 arch
//    with QK-norm and a head size of 2 x d_model / heads) with a real
//    tokenizer's first 4000 ranks: F32 files import to exactly the HF import's weights (so its
//    logits), BF16 / F16 to the HF weights rounded, Q8_0 within half a step of each block; next-token
//    log-probs against hf_family.py's float64 PyTorch forward; linear RoPE scaling (smollm2 shape);
//  - llama.cpp (node-llama-cpp, tests/reference/llama_gguf_check.mjs) on the same F32 files: its
//    tokenization of English and Chinese prompts and its greedy continuation equal ours;
// and the refusals (another architecture, a Q4_K tensor, a SentencePiece tokenizer) by name. The
// way back too: Smelt's GGUF export of each folder's HF import equals the converter's file, tensor
// for tensor and key for key (llama with rope_freqs.weight, qwen2 with biases, qwen3 with QK-norm,
// linear scaling).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/tiny_checkpoint.hpp"
#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/export_gguf.hpp"
#include "smelt/ckpt/import_gguf.hpp"
#include "smelt/ckpt/import_hf.hpp"
#include "smelt/common/batch.hpp"
#include "smelt/kernels/decode_linear.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/model/model.hpp"
#include "smelt/model/inference.hpp"
#include "smelt/model/params.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "smtn.hpp"
#include "test_references.hpp"
#include "tokenizer/tok_test_util.hpp"

namespace fs = std::filesystem;
using namespace smelt;
using json = nlohmann::json;

namespace {

const std::string kRef = std::string(SMELT_SOURCE_DIR) + "/tests/reference";
constexpr const char* kPython = "/usr/bin/python3";
constexpr int kShrunkVocab = 4000;  // the real tokenizers' first ranks: ids >= this are special or padding
constexpr int kLogprobTokens = 48;  // per text, for the log-prob comparisons
constexpr int kPredict = 16;        // greedy tokens per prompt
// Our log-probs on an F16 / BF16 / Q8_0 file against the float64 reference of the fp32 weights. The
// exact check is the weights' (F16 / BF16: the fp32 weights rounded, bit for bit; Q8_0: each within
// half a step of its block, max|block|/127, plus the fp16 scale's rounding); this bounds what that
// rounding does to hf_family.py's deliberately sharp models (attention far from uniform, spread
// logits), measured: F16 1.9e-2 (llama3.2) / 1.3e-2 (qwen2.5), BF16 0.15 / 0.10 (8x F16's, as
// 2^-8 / 2^-11), Q8_0 0.63 / 0.48; the bounds leave ~2.5x. F32 files: exactly the HF import's.
constexpr double kF16Bound = 5e-2, kBf16Bound = 0.5, kQ8Bound = 1.5;
// llama.cpp's top-10 next-token log-probs after each prompt against ours on the same F32 weights
// (its fp32 kernels and our fp32 kernels sum in different orders).
constexpr double kLlamaLogprobTol = 1e-4;

const std::vector<std::string> kPrompts = {"The river rises in the hills above", "Fishermen still gather there",
                                           "这条河发源于小镇北面的山丘", "孩子们放学后喜欢"};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// About 3000 bytes of real text from a file of tests/data/tokenizer, past its headings, whole lines.
std::string text_sample(const char* file) {
  const std::string t = slurp(std::string(SMELT_TEST_DATA) + "/tokenizer/" + file);
  const size_t b = t.find('\n', std::min<size_t>(1000, t.size()));
  if (b == std::string::npos) return t;
  const std::string s = t.substr(b + 1, 3000);
  return s.substr(0, s.rfind('\n') + 1);
}

// fp32 -> bf16 -> fp32, round to nearest even (finite values).
float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

int sh(const std::string& cmd, const fs::path& err) {
  return std::system((cmd + " 2> '" + err.string() + "'").c_str());
}

std::string canonical_toml(const ModelConfig& c) {
  std::ostringstream os;
  os << model_config_to_toml(model_config_canonical(c));
  return os.str();
}

// Folders and files every test shares, made once per process.
class ImportGguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("smelt_import_gguf_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void SetUp() override {
    SMELT_REQUIRE_REFERENCE(std::system((std::string(kPython) + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0,
                            "/usr/bin/python3 with torch (apt-get install python3-torch)");
    SMELT_REQUIRE_REFERENCE(test::refs_installed() && fs::exists(kRef + "/node_modules/node-llama-cpp/package.json"),
                            "tests/reference/node_modules with tiktoken, tokenizers and node-llama-cpp (scripts/install-deps)");
  }

  // The fixture tokenizer (llama3 / qwen2: cl100k ranks with that pre-tokenizer) cut to kShrunkVocab.
  static std::string shrunk(const std::string& name) {
    const fs::path out = dir_ / (name + "_4000.json");
    if (!fs::exists(out)) {
      const std::string cmd = fmt::format("{} {}/gguf_convert.py shrink-tokenizer '{}/{}.json' '{}' --vocab {}", kPython,
                                          kRef, test::fixtures(), name, out.string(), kShrunkVocab);
      EXPECT_EQ(sh(cmd, dir_ / "shrink.err"), 0) << cmd << "\n" << slurp((dir_ / "shrink.err").string());
    }
    return out.string();
  }

  static fs::path dir_;
};
fs::path ImportGguf::dir_;

// ---- (a) our own export --------------------------------------------------------------------------

TEST_F(ImportGguf, OwnExportImportsBackToItsWeightsAndTokenizer) {
  const std::string tok_path = shrunk("llama3");
  Tokenizer want_tok;
  ASSERT_TRUE(Tokenizer::load(tok_path, want_tok));
  ModelConfig c;
  c.vocab_size = 4032;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 96;
  c.max_seq_len = 256;
  c.tie_embeddings = false;
  c.init_std = 0.25;
  Model m;
  ASSERT_TRUE(m.init(c, 1, 8, 1, 42));
  const std::string run = (dir_ / "own_run").string();
  ASSERT_TRUE(test::save_tiny_checkpoint(m, run, 7, tok_path));
  const std::string step = ckpt_step_dir(run, 7);
  ModelConfig cc;
  std::vector<float> want;
  ASSERT_TRUE(ckpt_load_model(step, cc, want));
  const std::vector<std::string> texts = {text_sample("english.txt"), text_sample("chinese.txt")};

  for (GgufDtype dt : {GgufDtype::kF32, GgufDtype::kBf16, GgufDtype::kF16, GgufDtype::kQ8_0}) {
    SCOPED_TRACE(gguf_dtype_name(dt));
    const std::string file = (dir_ / fmt::format("own_{}.gguf", gguf_dtype_name(dt))).string();
    Status s = export_gguf(step, file, dt);
    ASSERT_TRUE(s) << s.message();
    ModelConfig got_c;
    std::vector<float> got;
    Tokenizer tok;
    GgufImportInfo info;
    s = import_gguf_model(file, 4096, got_c, got, tok, &info);
    ASSERT_TRUE(s) << s.message();
    EXPECT_EQ(info.architecture, "llama");
    EXPECT_EQ(canonical_toml(got_c), canonical_toml(cc));
    // The reference values: the checkpoint's for f32, the export's own loader's dequantization otherwise.
    // The tokenizer: the export's own loader's (same content hash), and the original's ids on real text.
    std::vector<float> ref = want;
    ModelConfig lc;
    std::vector<float> loaded;
    Tokenizer lt;
    ASSERT_TRUE(gguf_load_model(file, lc, loaded, lt));
    if (dt != GgufDtype::kF32) ref = loaded;
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), 4 * got.size()), 0);
    if (dt == GgufDtype::kBf16) {
      // The checkpoint's matrices rounded to the nearest bf16, the norms as they were.
      std::vector<float> rounded = want;
      for (const ParamTensor& t : param_layout(cc).tensors)
        if (t.cols > 1)
          for (int64_t k = t.offset; k < t.offset + t.size(); k++) rounded[k] = bf16_round_f32(want[k]);
      EXPECT_EQ(std::memcmp(got.data(), rounded.data(), 4 * got.size()), 0);
    }
    EXPECT_EQ(tok.content_hash(), lt.content_hash());
    for (const auto& t : texts) {
      std::vector<uint32_t> a, b;
      tok.encode(t, a, false);
      want_tok.encode(t, b, false);
      EXPECT_EQ(a, b) << t.substr(0, 80);
    }
  }

  // The whole import: a run folder whose step 0 loads to the same weights and tokenizer.
  GgufImportOptions o;
  o.gguf_path = (dir_ / "own_f32.gguf").string();
  o.run_dir = (dir_ / "own_import").string();
  GgufImportResult r;
  Status s = import_gguf(o, r);
  ASSERT_TRUE(s) << s.message();
  ModelConfig lc;
  std::vector<float> lp;
  ASSERT_TRUE(ckpt_load_model(r.step_dir, lc, lp));
  EXPECT_EQ(canonical_toml(lc), canonical_toml(cc));
  ASSERT_EQ(lp.size(), want.size());
  EXPECT_EQ(std::memcmp(lp.data(), want.data(), 4 * lp.size()), 0);
  Tokenizer saved;
  ASSERT_TRUE(Tokenizer::load(r.step_dir + "/tokenizer.json", saved));
  for (const auto& t : texts) {
    std::vector<uint32_t> a, b;
    saved.encode(t, a, false);
    want_tok.encode(t, b, false);
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(r.import_state["format"], "gguf");
  EXPECT_EQ(r.import_state["tokenizer.ggml.pre"], "llama-bpe");
  // A second import into the same run is refused, naming the folder and --force.
  GgufImportResult r2;
  s = import_gguf(o, r2);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("--force"), std::string::npos) << s.message();
  o.force = true;
  EXPECT_TRUE(import_gguf(o, r2));
}

// ---- (b) + (c) + (d): files from gguf_convert.py ---------------------------------------------------

struct Family {
  const char* name;      // hf_family.py --family
  const char* tokenizer; // fixture
  const char* pre;       // tokenizer.ggml.pre
  const char* arch;
};

class ImportGgufConverted : public ImportGguf, public ::testing::WithParamInterface<Family> {};

// The next-token log-probs of hf_family.py's float64 forward of hf_dir on each row of tokens.
std::vector<std::vector<float>> reference_logprobs(const fs::path& dir, const std::string& hf_dir,
                                                   const std::vector<std::vector<int32_t>>& rows) {
  test::Tensor t;
  t.dims = {(int64_t)rows.size(), (int64_t)rows[0].size()};
  for (const auto& r : rows) t.i.insert(t.i.end(), r.begin(), r.end());
  const std::string in = (dir / "ref_in.smtn").string(), out = (dir / "ref_out.smtn").string();
  test::write_smtn(in, {{"tokens", t}});
  const std::string cmd = fmt::format("{} {}/hf_family.py logprobs '{}' '{}' '{}'", kPython, kRef, hf_dir, in, out);
  EXPECT_EQ(sh(cmd, dir / "ref.err"), 0) << cmd << "\n" << slurp((dir / "ref.err").string());
  test::TensorMap m = test::read_smtn(out);
  const test::Tensor& lp = m["logprobs"];
  std::vector<std::vector<float>> res;
  const size_t per = lp.f.size() / std::max<size_t>(1, rows.size());
  for (size_t b = 0; b < rows.size(); b++) res.emplace_back(lp.f.begin() + b * per, lp.f.begin() + (b + 1) * per);
  return res;
}

// Next-token log-probs (T, V) of one sequence: the training forward in fp32, log softmax in double.
std::vector<double> logprobs(const ModelConfig& c, const std::vector<float>& p, const std::vector<int32_t>& ids) {
  const int T = (int)ids.size();
  Model m;
  EXPECT_TRUE(m.init(c, 1, T, 2, 0));
  if ((int64_t)p.size() != m.layout().total) return {};
  std::copy(p.begin(), p.end(), m.params());
  Batch b;
  b.B = 1;
  b.T = T;
  b.inputs = ids;
  b.targets.assign(T, -1);
  float loss = 0;
  EXPECT_TRUE(m.forward(b, loss));
  std::vector<double> out((size_t)T * c.vocab_size);
  for (int t = 0; t < T; t++) {
    const float* z = m.acts().logits + (int64_t)t * c.vocab_size;
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < c.vocab_size; v++) mx = std::max(mx, (double)z[v]);
    for (int v = 0; v < c.vocab_size; v++) sum += std::exp((double)z[v] - mx);
    for (int v = 0; v < c.vocab_size; v++) out[(size_t)t * c.vocab_size + v] = (double)z[v] - mx - std::log(sum);
  }
  return out;
}

// Greedy decoding of ids with InferenceSession, never picking ids >= first_never (llama.cpp is
// given the same list: padding rows and special tokens).
std::vector<int32_t> greedy(const ModelConfig& c, const std::vector<float>& p, const std::vector<int32_t>& ids,
                            int first_never, std::vector<double>* logprobs) {
  InferenceSession s;
  EXPECT_TRUE(s.init(c, p.data(), (int)ids.size() + kPredict, 1, WeightFormat::kF32));
  std::vector<float> logits(c.vocab_size);
  EXPECT_TRUE(s.prefill(ids.data(), (int)ids.size(), logits.data()));
  if (logprobs) {
    double mx = -INFINITY, sum = 0;
    for (float v : logits) mx = std::max(mx, (double)v);
    for (float v : logits) sum += std::exp(v - mx);
    for (float v : logits) logprobs->push_back(v - mx - std::log(sum));
  }
  std::vector<int32_t> out;
  for (int k = 0; k < kPredict; k++) {
    const int32_t best = (int32_t)(std::max_element(logits.begin(), logits.begin() + first_never) - logits.begin());
    out.push_back(best);
    if (k + 1 < kPredict) {
      EXPECT_TRUE(s.step(best, logits.data()));
    }
  }
  return out;
}

// (c) llama.cpp on file (imported as c, p, tok): its tokenization of the prompts, its top-10
// next-token log-probs and its greedy continuations against ours. Returns what llama.cpp said.
json llama_cpp_agrees(const fs::path& dir, const std::string& file, const ModelConfig& c, const std::vector<float>& p,
                      const Tokenizer& tok, const std::string& what) {
  std::vector<int> never;
  for (int id = kShrunkVocab; id < c.vocab_size; id++) never.push_back(id);
  json spec = {{"model", file}, {"texts", json::array()}, {"prompts", kPrompts}, {"n_predict", kPredict},
               {"top", 10}, {"threads", 2}, {"never", never}, {"context_size", 256}};
  const std::string sp = (dir / "spec.json").string(), out = (dir / "llama.json").string();
  std::ofstream(sp) << spec.dump();
  const std::string node = "cd " + kRef + " && node llama_gguf_check.mjs '" + sp + "' > '" + out + "'";
  const int rc = sh(node, dir / "llama.err");
  EXPECT_EQ(rc, 0) << node << "\n" << slurp((dir / "llama.err").string());
  if (rc != 0) return json();
  const json j = json::parse(slurp(out));
  EXPECT_FALSE(j["degraded"].get<bool>()) << j["warnings"].dump();
  double worst_lp = 0;
  std::string agree;
  for (size_t q = 0; q < kPrompts.size(); q++) {
    std::vector<uint32_t> raw;
    tok.encode(kPrompts[q], raw, false);
    const std::vector<int32_t> ids(raw.begin(), raw.end());
    EXPECT_EQ(j["prompts"][q]["ids"].get<std::vector<int32_t>>(), ids) << kPrompts[q];
    std::vector<double> lp;
    const std::vector<int32_t> mine = greedy(c, p, ids, kShrunkVocab, &lp);
    for (const auto& e : j["prompts"][q]["top"])
      worst_lp = std::max(worst_lp, std::fabs(e[1].get<double>() - lp[e[0].get<int>()]));
    const std::vector<int32_t> theirs = j["prompts"][q]["continuation"].get<std::vector<int32_t>>();
    EXPECT_EQ(theirs, mine) << kPrompts[q];
    size_t n = 0;
    while (n < mine.size() && n < theirs.size() && mine[n] == theirs[n]) n++;
    agree += (agree.empty() ? "" : " ") + std::to_string(n);
  }
  std::printf("[%s] llama.cpp %s: prompts tokenized as ours; greedy tokens equal (of %d): %s; top-10 "
              "log-prob max|diff| %.3g\n", what.c_str(), j["llama_cpp"].get<std::string>().c_str(), kPredict,
              agree.c_str(), worst_lp);
  EXPECT_LE(worst_lp, kLlamaLogprobTol);
  return j;
}

// Smelt's import of the HF folder hf_dir into run_dir, exported to GGUF F32 at gguf.
void import_then_export_f32(const std::string& hf_dir, const fs::path& run_dir, const std::string& gguf,
                            HfImportResult& r) {
  HfImportOptions o;
  o.hf_dir = hf_dir;
  o.run_dir = run_dir.string();
  Status s = import_hf(o, r);
  ASSERT_TRUE(s) << s.message();
  s = export_gguf(r.step_dir, gguf, GgufDtype::kF32);
  ASSERT_TRUE(s) << s.message();
}

// The way back: Smelt's import of an fp32 HF folder exported to GGUF F32 holds the independent
// converter's tensors bit for bit (its permuted llama Q/K rows, qwen2's biases; rope_freqs.weight
// within 1e-6 relative: each side derives it in its own arithmetic) and its {arch}.* keys (but
// context_length: the import caps the context at 4096; and attention.key_length / value_length,
// which the converter writes whenever config.json names head_dim and Smelt when the head size
// is not embedding_length / head_count, so absent only when it equals that).
void expect_export_is_the_converters(const fs::path& dir, const std::string& hf_dir, const std::string& converted,
                                     const std::string& want_arch, const ModelConfig& hc) {
  const std::string ours = (dir / "ours_f32.gguf").string();
  HfImportResult r;
  ASSERT_NO_FATAL_FAILURE(import_then_export_f32(hf_dir, dir / "hf_run", ours, r));
  GgufReader a, b;
  ASSERT_TRUE(a.open(ours));
  ASSERT_TRUE(b.open(converted));
  std::string arch;
  ASSERT_TRUE(a.get_string("general.architecture", arch));
  EXPECT_EQ(arch, want_arch);
  EXPECT_EQ(a.tensors().size(), b.tensors().size());
  for (const GgufTensorInfo& tb : b.tensors()) {
    const GgufTensorInfo* ta = a.find_tensor(tb.name);
    ASSERT_NE(ta, nullptr) << tb.name;
    ASSERT_EQ(ta->type, tb.type) << tb.name;
    ASSERT_EQ(ta->ne, tb.ne) << tb.name;
    const float* va = reinterpret_cast<const float*>(a.tensor_data(*ta));
    const float* vb = reinterpret_cast<const float*>(b.tensor_data(tb));
    if (tb.name == "rope_freqs.weight") {
      for (int64_t k = 0; k < tb.elements(); k++) EXPECT_NEAR(va[k] / vb[k], 1.0, 1e-6) << tb.name << " " << k;
    } else {
      EXPECT_EQ(std::memcmp(va, vb, (size_t)tb.bytes), 0) << tb.name;
    }
  }
  for (const std::string& k : b.keys()) {
    if (k.rfind(arch + ".", 0) != 0 || k == arch + ".context_length") continue;
    const GgufValue* x = a.find(k);
    const GgufValue* y = b.find(k);
    if (!x && (k == arch + ".attention.key_length" || k == arch + ".attention.value_length")) {
      EXPECT_EQ(y->u, (uint64_t)(hc.d_model / hc.n_heads)) << k;
      continue;
    }
    ASSERT_NE(x, nullptr) << k << " is missing from Smelt's file";
    EXPECT_EQ(x->u, y->u) << k;
    EXPECT_EQ(x->f, y->f) << k;
    EXPECT_EQ(x->str, y->str) << k;
  }
  std::printf("[%s] Smelt's GGUF export of the HF import: %zu tensors and the %s.* keys of the converter's file\n",
              hf_dir.c_str(), b.tensors().size(), arch.c_str());
}

TEST_P(ImportGgufConverted, MatchesHfImportReferenceAndLlamaCpp) {
  const Family fam = GetParam();
  const fs::path dir = dir_ / fam.name;
  fs::create_directories(dir);
  const std::string tok_path = shrunk(fam.tokenizer);
  // An fp32 HF folder and its GGUF files.
  std::string cmd = fmt::format("{} {}/hf_family.py write '{}' --family {} --dtype fp32 --shards 1 --seed 5 "
                                "--tokenizer '{}'", kPython, kRef, (dir / "fp32").string(), fam.name, tok_path);
  ASSERT_EQ(sh(cmd, dir / "write.err"), 0) << cmd << "\n" << slurp((dir / "write.err").string());
  auto gguf = [&](const std::string& t) { return (dir / (t + ".gguf")).string(); };
  cmd = fmt::format("{} {}/gguf_convert.py convert '{}' --pre {} --out f32:{} --out bf16:{} --out f16:{} --out q8_0:{}",
                    kPython, kRef, (dir / "fp32").string(), fam.pre, gguf("f32"), gguf("bf16"), gguf("f16"),
                    gguf("q8_0"));
  if (std::string(fam.arch) == "llama")  // (d): the refusals, crafted from the same folder
    cmd += fmt::format(" --out f32:{}:arch=gemma3 --out f32:{}:type=blk.0.ffn_down.weight=Q4_K --out "
                       "f32:{}:tokenizer_model=llama --out f32:{}:u32=llama.expert_count=8", gguf("arch"), gguf("q4k"),
                       gguf("spm"), gguf("experts"));
  if (std::string(fam.arch) == "qwen2")  // qwen2's biases under the name qwen3 (which has QK-norm instead)
    cmd += fmt::format(" --out f32:{}:rename=qwen3", gguf("qwen3bias"));
  ASSERT_EQ(sh(cmd, dir / "convert.err"), 0) << cmd << "\n" << slurp((dir / "convert.err").string());

  // The HF import of the folder: config and weights.
  HfModelInfo hf32;
  ASSERT_TRUE(import_hf_config((dir / "fp32").string(), 4096, hf32));
  std::vector<float> w32;
  ASSERT_TRUE(import_hf_weights((dir / "fp32").string(), hf32.config, w32));
  const ModelConfig& hc = hf32.config;
  Tokenizer hf_tok;
  ASSERT_TRUE(Tokenizer::load(tok_path, hf_tok));

  // Real text, kLogprobTokens tokens each, through the float64 reference of the fp32 folder.
  std::vector<std::vector<int32_t>> rows;
  for (const char* f : {"english.txt", "chinese.txt"}) {
    std::vector<uint32_t> ids;
    hf_tok.encode(text_sample(f), ids, false);
    ASSERT_GE(ids.size(), (size_t)kLogprobTokens);
    rows.emplace_back(ids.begin(), ids.begin() + kLogprobTokens);
  }
  const auto ref = reference_logprobs(dir, (dir / "fp32").string(), rows);
  ASSERT_EQ(ref.size(), rows.size());
  double ref_tol = INFINITY;  // the HF import's tolerance (docs/import.md): 1e-4 x max(1, max |ref logprob|)
  auto ours_vs_ref = [&](const ModelConfig& c, const std::vector<float>& p) {
    double worst = 0;
    for (size_t b = 0; b < rows.size(); b++) {
      const std::vector<double> lp = logprobs(c, p, rows[b]);
      if (lp.size() != ref[b].size()) return (double)INFINITY;
      double ref_max = 1;
      for (size_t k = 0; k < lp.size(); k++) {
        const double diff = std::fabs(lp[k] - ref[b][k]);
        worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
        ref_max = std::max(ref_max, std::fabs((double)ref[b][k]));
      }
      ref_tol = std::min(ref_tol, 1e-4 * ref_max);
    }
    return worst;
  };
  const double hf_diff = ours_vs_ref(hc, w32);
  EXPECT_LE(hf_diff, ref_tol) << "the HF import itself against the reference";

  const ParamLayout layout = param_layout(hc);
  for (const std::string t : {"f32", "bf16", "f16", "q8_0"}) {
    SCOPED_TRACE(std::string(fam.name) + " " + t);
    ModelConfig c;
    std::vector<float> p;
    Tokenizer tok;
    GgufImportInfo info;
    Status s = import_gguf_model(gguf(t), 4096, c, p, tok, &info);
    ASSERT_TRUE(s) << s.message();
    EXPECT_EQ(info.architecture, fam.arch);
    EXPECT_EQ(canonical_toml(c), canonical_toml(hc));
    ASSERT_EQ(p.size(), w32.size());
    // Weights: exact for F32; for BF16 / F16 the fp32 weights rounded to nearest even (what an HF
    // folder written as bf16 / fp16 from the same seed holds, as hf_family.py draws in fp32), bit for
    // bit; within a Q8_0 step for Q8_0. Norms (1-D) stay F32.
    if (t == "f32") {
      EXPECT_EQ(std::memcmp(p.data(), w32.data(), 4 * p.size()), 0);
    } else if (t == "f16" || t == "bf16") {
      int64_t differ = 0;
      for (const auto& pt : layout.tensors)
        for (int64_t k = 0; k < pt.size(); k++) {
          const float x = w32[pt.offset + k];
          const float want = pt.cols == 1 ? x : t == "f16" ? f32_from_fp16(fp16_from_f32(x)) : bf16_round(x);
          differ += std::memcmp(&want, &p[pt.offset + k], 4) != 0;
        }
      EXPECT_EQ(differ, 0);
    } else {
      int64_t outside = 0;
      for (const auto& pt : layout.tensors)
        for (int64_t b0 = 0; b0 < pt.size(); b0 += 32) {
          const int64_t n = std::min<int64_t>(32, pt.size() - b0);
          float amax = 0;
          for (int64_t k = 0; k < n; k++) amax = std::max(amax, std::fabs(w32[pt.offset + b0 + k]));
          const double bound = pt.cols == 1 ? 0.0 : amax / 127.0 * 0.5625 * (1 + 1e-5);  // d/2 + 127 x fp16(d)'s error
          for (int64_t k = 0; k < n; k++)
            outside += std::fabs((double)p[pt.offset + b0 + k] - w32[pt.offset + b0 + k]) > bound;
        }
      EXPECT_EQ(outside, 0);
    }
    // The tokenizer: the HF one's ids on real text.
    for (const auto& f : {"english.txt", "chinese.txt"}) {
      const std::string text = text_sample(f);
      std::vector<uint32_t> a, b;
      tok.encode(text, a, false);
      hf_tok.encode(text, b, false);
      EXPECT_EQ(a, b) << f;
    }
    // Log-probs against the float64 reference of the fp32 weights.
    const double d = ours_vs_ref(c, p);
    const double bound = t == "f16" ? kF16Bound : t == "bf16" ? kBf16Bound : t == "q8_0" ? kQ8Bound : hf_diff;
    std::printf("[%s %s] %s; tensor types %s; max |logprob - float64 reference| %.3g (the HF import's %.3g)\n",
                fam.name, t.c_str(), info.rope.c_str(), json(info.types).dump().c_str(), d, hf_diff);
    EXPECT_LE(d, bound);

    if (t != "f32") continue;
    const json j = llama_cpp_agrees(dir, gguf(t), c, p, tok, std::string(fam.name) + " f32");
    ASSERT_TRUE(j.is_object());
    // The CLI: `smelt import --gguf` into a run, then `smelt generate` greedy continues each prompt
    // as llama.cpp does.
    const std::string run = (dir / "run").string();
    test::CmdResult x = test::run_smelt(fmt::format("import --gguf '{}' --output '{}' --json", gguf(t), run), dir);
    ASSERT_EQ(x.rc, 0) << x.err;
    EXPECT_EQ(json::parse(x.out)["architecture"], fam.arch);
    for (size_t q = 0; q < kPrompts.size(); q++) {
      test::CmdResult g = test::run_smelt(fmt::format("generate --checkpoint '{}' --prompt '{}' --temperature 0 "
                                                      "--max-new-tokens {} --json", run, kPrompts[q], kPredict), dir);
      ASSERT_EQ(g.rc, 0) << g.err;
      EXPECT_EQ(json::parse(g.out)["ids"], j["prompts"][q]["continuation"]) << kPrompts[q];
    }
  }

  // (e) The way back.
  expect_export_is_the_converters(dir, (dir / "fp32").string(), gguf("f32"), fam.arch, hc);

  // (d) Refusals, each naming what it refuses.
  std::vector<std::pair<std::string, std::vector<std::string>>> refusals;
  if (std::string(fam.arch) == "llama")
    refusals = {{"arch", {"general.architecture", "gemma3"}},
                {"q4k", {"blk.0.ffn_down.weight", "Q4_K"}},
                {"spm", {"tokenizer.ggml.model", "'llama'", "SentencePiece"}},
                {"experts", {"llama.expert_count"}}};
  else if (std::string(fam.arch) == "qwen2")
    refusals = {{"qwen3bias", {"blk.0.attn_q.bias", "qwen3", "no q/k/v biases"}}};
  for (const auto& [file, words] : refusals) {
    ModelConfig c;
    std::vector<float> p;
    Tokenizer tok;
    Status s = import_gguf_model(gguf(file), 4096, c, p, tok);
    ASSERT_FALSE(s) << file;
    for (const auto& w : words) EXPECT_NE(s.message().find(w), std::string::npos) << s.message();
    std::printf("refused: %s\n", s.message().c_str());
  }
}

// SmolLM2's shape (llama arch, 9 heads of 64, 3 KV heads, tied, no head_dim key) with linear RoPE
// scaling added to its config.json: {arch}.rope.scaling.type linear + factor, no rope_freqs.weight.
TEST_F(ImportGguf, LinearRopeScalingMatchesHfImportAndLlamaCpp) {
  const fs::path dir = dir_ / "smollm2_linear";
  const std::string tok_path = shrunk("llama3"), hf = (dir / "hf").string(), file = (dir / "f32.gguf").string();
  std::string cmd = fmt::format("{} {}/hf_family.py write '{}' --family smollm2 --dtype fp32 --shards 1 --seed 9 "
                                "--tokenizer '{}'", kPython, kRef, hf, tok_path);
  ASSERT_EQ(sh(cmd, dir_ / "write.err"), 0) << cmd << "\n" << slurp((dir_ / "write.err").string());
  json cfg = json::parse(slurp(hf + "/config.json"));
  cfg["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  std::ofstream(hf + "/config.json") << cfg.dump(2);
  cmd = fmt::format("{} {}/gguf_convert.py convert '{}' --pre llama-bpe --out f32:{}", kPython, kRef, hf, file);
  ASSERT_EQ(sh(cmd, dir_ / "convert.err"), 0) << cmd << "\n" << slurp((dir_ / "convert.err").string());
  HfModelInfo info;
  ASSERT_TRUE(import_hf_config(hf, 4096, info));
  ASSERT_EQ(info.config.rope_scaling, RopeScaling::kLinear);
  std::vector<float> w;
  ASSERT_TRUE(import_hf_weights(hf, info.config, w));
  ModelConfig c;
  std::vector<float> p;
  Tokenizer tok;
  GgufImportInfo gi;
  Status s = import_gguf_model(file, 4096, c, p, tok, &gi);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(gi.rope, "linear factor 4");
  EXPECT_EQ(canonical_toml(c), canonical_toml(info.config));
  ASSERT_EQ(p.size(), w.size());
  EXPECT_EQ(std::memcmp(p.data(), w.data(), 4 * p.size()), 0);
  llama_cpp_agrees(dir, file, c, p, tok, "smollm2 linear x4 f32");
  expect_export_is_the_converters(dir, hf, file, "llama", info.config);
}

// What llama.cpp's architectures the export writes cannot hold is refused by name: QK-norm beside
// q/k/v biases (qwen3 has one, qwen2 the other) and Llama 3 RoPE scaling beside biases (qwen2 reads
// no rope_freqs.weight).
TEST_F(ImportGguf, ExportRefusesQkNormWithBiasesAndLlama3ScalingWithBiasesByName) {
  const std::string tok_path = shrunk("llama3");
  ModelConfig base;
  base.vocab_size = 4032;
  base.d_model = 64;
  base.n_layers = 1;
  base.n_heads = 4;
  base.n_kv_heads = 2;
  base.ffn_hidden = 96;
  base.max_seq_len = 128;
  ModelConfig qk = base, bias3 = base;
  qk.qk_norm = true;
  qk.qkv_bias = true;
  bias3.qkv_bias = true;
  bias3.rope_scaling = RopeScaling::kLlama3;
  bias3.rope_factor = 8;
  bias3.rope_original_max_seq_len = 64;
  for (const auto& [name, c, words] :
       {std::tuple<std::string, ModelConfig, std::vector<std::string>>{"qk", qk, {"qk_norm with qkv_bias"}},
        {"bias3", bias3, {"rope_scaling = \"llama3\"", "qkv_bias"}}}) {
    Model m;
    ASSERT_TRUE(m.init(c, 1, 8, 1, 42));
    const std::string run = (dir_ / ("refuse_" + name)).string();
    ASSERT_TRUE(test::save_tiny_checkpoint(m, run, 1, tok_path));
    const std::string out = (dir_ / ("refuse_" + name + ".gguf")).string();
    Status s = export_gguf(ckpt_step_dir(run, 1), out, GgufDtype::kF32);
    ASSERT_FALSE(s) << name;
    for (const auto& w : words) EXPECT_NE(s.message().find(w), std::string::npos) << s.message();
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out + ".tmp"));
  }
}

// Qwen3 (QK-norm, head_dim 128 over d_model 256): the HF import of hf_family.py's folder exported
// as llama.cpp's qwen3 (attn_q_norm / attn_k_norm, attention.key_length, NEOX RoPE); llama.cpp
// loads it without a warning, tokenizes as we do, and its greedy continuations and top-10 log-probs
// are ours (the HF import's weights, which --check holds to the PyTorch reference). Smelt's own
// reader takes the file back: the checkpoint's config, its weights bit for bit.
TEST_F(ImportGguf, Qwen3ExportRunsInLlamaCppAsTheImportDoes) {
  const fs::path dir = dir_ / "qwen3_export";
  fs::create_directories(dir);
  const std::string tok_path = shrunk("qwen2"), hf = (dir / "hf").string(), file = (dir / "qwen3.gguf").string();
  const std::string cmd = fmt::format("{} {}/hf_family.py write '{}' --family qwen3 --dtype fp32 --shards 1 --seed 11 "
                                      "--tokenizer '{}'", kPython, kRef, hf, tok_path);
  ASSERT_EQ(sh(cmd, dir / "write.err"), 0) << cmd << "\n" << slurp((dir / "write.err").string());
  HfImportResult r;
  ASSERT_NO_FATAL_FAILURE(import_then_export_f32(hf, dir / "run", file, r));
  ASSERT_TRUE(r.info.config.qk_norm);
  GgufReader g;
  ASSERT_TRUE(g.open(file));
  std::string arch;
  ASSERT_TRUE(g.get_string("general.architecture", arch));
  EXPECT_EQ(arch, "qwen3");
  uint32_t key_length = 0;
  ASSERT_TRUE(g.get_u32("qwen3.attention.key_length", key_length));
  EXPECT_EQ((int)key_length, r.info.config.head_size());
  EXPECT_NE(g.find_tensor("blk.0.attn_q_norm.weight"), nullptr);
  EXPECT_NE(g.find_tensor("blk.1.attn_k_norm.weight"), nullptr);
  ModelConfig c;
  std::vector<float> p;
  ASSERT_TRUE(ckpt_load_model(r.step_dir, c, p));
  Tokenizer tok;
  ASSERT_TRUE(Tokenizer::load(r.step_dir + "/tokenizer.json", tok));
  llama_cpp_agrees(dir, file, c, p, tok, "qwen3 f32 (Smelt's export)");
  ModelConfig back;
  std::vector<float> bp;
  Tokenizer btok;
  GgufImportInfo bi;
  Status s = import_gguf_model(file, c.max_seq_len, back, bp, btok, &bi);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(bi.architecture, "qwen3");
  EXPECT_TRUE(back.qk_norm);
  EXPECT_EQ(canonical_toml(back), canonical_toml(c));
  ASSERT_EQ(bp.size(), p.size());
  EXPECT_EQ(std::memcmp(bp.data(), p.data(), 4 * p.size()), 0);
}

INSTANTIATE_TEST_SUITE_P(Families, ImportGgufConverted,
                         ::testing::Values(Family{"llama3.2", "llama3", "llama-bpe", "llama"},
                                           Family{"qwen2.5", "qwen2", "qwen2", "qwen2"},
                                           Family{"qwen3", "qwen2", "qwen2", "qwen3"}),
                         [](const auto& info) { return std::string(info.param.arch); });

}  // namespace
