// GGUF export and loading (ckpt/gguf.hpp, ckpt/export_gguf.hpp). Each exported file (f32, bf16,
// f16, q8_0; untied head with a feed-forward size that is not whole Q8_0 blocks, and a tied head) is
// parsed by a reader written here from the GGUF spec (ggml docs/gguf.md), independent of
// GgufReader: magic, version 3, counts, every key's type and value, the vocabulary rebuilt from the
// tokenizer in GPT-2's byte-level alphabet written out here, tensor names / ne / types / offsets /
// alignment, and the data against the checkpoint (Q and K rows permuted as convert_hf_to_gguf.py's
// reshape(n_head, 2, HS/2, C).swapaxes(1, 2), done here by index; bf16 the nearest value, bit for
// bit). Then GgufReader and gguf_load_model give back the tensor types, the config, the tokenizer
// (same content hash) and the weights (f32 exactly; bf16, f16 and q8_0 re-encode to the same
// bytes), and InferenceSession's logits on real text equal the checkpoint's (f32 bit for bit; bf16,
// f16 and q8_0 within the tolerance of export_gguf_check). Refusals name the file, the offset or
// tensor and what was expected.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/tiny_checkpoint.hpp"
#include "smelt/ckpt/export_gguf.hpp"
#include "smelt/ckpt/gguf.hpp"
#include "smelt/kernels/decode_linear.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/model/inference.hpp"
#include "smelt/model/params.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- a GGUF reader written from the spec, sharing nothing with src/ ------------------------------
struct SpecKv {
  uint32_t type = 0, elem = 0;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<std::string> strs;
  std::vector<int64_t> ints;
  std::vector<double> flts;
};
struct SpecTensor {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;
};
struct SpecFile {
  std::string bytes;
  uint32_t version = 0;
  uint64_t n_tensors = 0, n_kv = 0, header_end = 0, data_start = 0;
  std::vector<std::pair<std::string, SpecKv>> kvs;  // in file order
  std::vector<SpecTensor> tensors;
  const SpecKv* kv(const std::string& k) const {
    for (const auto& [key, v] : kvs)
      if (key == k) return &v;
    return nullptr;
  }
};

bool spec_parse(const std::string& path, SpecFile& f) {
  f.bytes = slurp(path);
  size_t p = 0;
  bool ok = true;
  auto need = [&](size_t n) {
    if (p + n > f.bytes.size()) ok = false;
    return ok;
  };
  auto rd = [&](auto& v) {
    if (need(sizeof v)) std::memcpy(&v, f.bytes.data() + p, sizeof v), p += sizeof v;
  };
  auto rd_str = [&]() {
    uint64_t n = 0;
    rd(n);
    std::string s;
    if (ok && need(n)) s.assign(f.bytes.data() + p, n), p += n;
    return s;
  };
  if (!need(4) || f.bytes.compare(0, 4, "GGUF") != 0) return false;
  p = 4;
  rd(f.version);
  rd(f.n_tensors);
  rd(f.n_kv);
  // value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array, 10 u64,
  // 11 i64, 12 f64
  auto scalar = [&](uint32_t t, SpecKv& v) {
    switch (t) {
      case 0: { uint8_t x = 0; rd(x); v.u = x; break; }
      case 1: { int8_t x = 0; rd(x); v.i = x; break; }
      case 2: { uint16_t x = 0; rd(x); v.u = x; break; }
      case 3: { int16_t x = 0; rd(x); v.i = x; break; }
      case 4: { uint32_t x = 0; rd(x); v.u = x; break; }
      case 5: { int32_t x = 0; rd(x); v.i = x; break; }
      case 6: { float x = 0; rd(x); v.f = x; break; }
      case 7: { uint8_t x = 0; rd(x); v.u = x; break; }
      case 10: { uint64_t x = 0; rd(x); v.u = x; break; }
      case 11: { int64_t x = 0; rd(x); v.i = x; break; }
      case 12: { double x = 0; rd(x); v.f = x; break; }
      default: ok = false;
    }
  };
  for (uint64_t k = 0; ok && k < f.n_kv; k++) {
    std::string key = rd_str();
    SpecKv v;
    rd(v.type);
    if (v.type == 8) {
      v.s = rd_str();
    } else if (v.type == 9) {
      uint64_t n = 0;
      rd(v.elem);
      rd(n);
      for (uint64_t j = 0; ok && j < n; j++) {
        if (v.elem == 8) {
          v.strs.push_back(rd_str());
        } else {
          SpecKv e;
          scalar(v.elem, e);
          if (v.elem == 6 || v.elem == 12) v.flts.push_back(e.f);
          else v.ints.push_back(e.i ? e.i : (int64_t)e.u);
        }
      }
    } else {
      scalar(v.type, v);
    }
    f.kvs.emplace_back(key, v);
  }
  for (uint64_t k = 0; ok && k < f.n_tensors; k++) {
    SpecTensor t;
    t.name = rd_str();
    uint32_t nd = 0;
    rd(nd);
    for (uint32_t d = 0; ok && d < nd; d++) {
      uint64_t x = 0;
      rd(x);
      t.ne.push_back(x);
    }
    rd(t.type);
    rd(t.offset);
    f.tensors.push_back(t);
  }
  f.header_end = p;
  uint64_t align = 32;
  if (const SpecKv* a = f.kv("general.alignment")) align = a->u;
  f.data_start = (p + align - 1) / align * align;
  return ok;
}

// GPT-2's bytes_to_unicode, written out again: printable Latin-1 bytes stand for themselves, the
// other 68 become U+0100.. in byte order.
std::string gpt2_bytes_to_text(const std::string& raw) {
  auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
  std::string out;
  for (unsigned char c : raw) {
    int cp = c;
    if (!printable(c)) {
      int n = 0;
      for (int b = 0; b < c; b++) n += !printable(b);
      cp = 256 + n;
    }
    if (cp < 0x80) out += (char)cp;
    else out += (char)(0xC0 | (cp >> 6)), out += (char)(0x80 | (cp & 0x3F));
  }
  return out;
}

float half_to_float(uint16_t h) {  // IEEE binary16, by its definition
  int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25);
  return (float)(sign ? -v : v);
}

float bf16_to_float(uint16_t h) {  // the upper half of an IEEE binary32
  const uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The bf16 nearest to x, ties to the even one, found by comparing the two candidates' distances in
// double (not src/'s add-and-shift); a NaN stays a quiet NaN, as ggml's GGML_FP32_TO_BF16 keeps it.
uint16_t bf16_nearest(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return (uint16_t)((u >> 16) | 0x40);
  const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);  // toward zero, and the next away
  if ((u & 0xffff) == 0) return lo;
  double vh = bf16_to_float(hi);
  if (std::isinf(vh)) vh = std::copysign(std::ldexp(1.0, 128), vh);  // past the largest: rounds to inf
  const double dl = std::fabs((double)x - bf16_to_float(lo)), dh = std::fabs(vh - (double)x);
  return dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
}

struct Case {
  const char* dtype;
  bool tied;
  int ffn;
};

ModelConfig test_config(const Case& k) {
  ModelConfig c;
  c.vocab_size = 416;  // the tokenizer has 400: 16 padded ids
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = k.ffn;
  c.max_seq_len = 64;
  c.rope_theta = 500000.0;
  c.norm_eps = 1e-5;
  c.tie_embeddings = k.tied;
  c.init_std = 0.1;
  return c;
}

class Gguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("smelt_gguf_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tok_path_ = (dir_ / "tokenizer.json").string();
    ASSERT_TRUE(test::train_tiny_tokenizer(tok_path_, 400));
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  // A tiny untied checkpoint (seed) saved as run_<dtype> and exported through the command line with
  // --dtype D --check --json to cli/model-<dtype>.gguf: the command's result; run and out named.
  static test::CmdResult export_checked(const std::string& dtype, uint64_t seed, std::string& run, std::string& out) {
    const ModelConfig c = test_config({dtype.c_str(), false, 96});
    Model m;
    EXPECT_TRUE(m.init(c, 1, 8, 1, seed));
    run = (dir_ / ("run_" + dtype)).string(), out = (dir_ / "cli" / ("model-" + dtype + ".gguf")).string();
    EXPECT_TRUE(test::save_tiny_checkpoint(m, run, 3, tok_path_));
    return test::run_smelt("export --checkpoint " + run + " --format gguf --dtype " + dtype + " --output " + out +
                               " --check --json",
                           dir_);
  }
  // What every --check --json export of that checkpoint reports: passed, the matrices (token_embd,
  // 7 a layer, output) in `matrices`, the norms F32, a nonzero difference.
  static void expect_checked(const nlohmann::json& j, const char* matrices) {
    EXPECT_EQ(j["check"], "passed");
    EXPECT_EQ(j["types"][matrices], 1 + 7 * 2 + 1);
    EXPECT_EQ(j["types"]["F32"], 2 * 2 + 1);
    EXPECT_GT(j["check_rel_diff"].get<double>(), 0.0);
  }
  static fs::path dir_;
  static std::string tok_path_;
};
fs::path Gguf::dir_;
std::string Gguf::tok_path_;

// Real English and Chinese text, tokenized: the prompt of the logits comparison.
std::vector<int32_t> real_text_ids(const Tokenizer& tok, size_t n) {
  std::string text = slurp(std::string(SMELT_TEST_DATA) + "/tokenizer/english.txt").substr(0, 300) +
                     slurp(std::string(SMELT_TEST_DATA) + "/tokenizer/chinese.txt").substr(400, 300);
  std::vector<uint32_t> ids;
  tok.encode(text, ids);
  std::vector<int32_t> out(ids.begin(), ids.begin() + std::min(n, ids.size()));
  return out;
}

void check_export(const fs::path& dir, const std::string& tok_path, const Case& k) {
  SCOPED_TRACE(std::string(k.dtype) + (k.tied ? " tied" : " untied") + " ffn " + std::to_string(k.ffn));
  const ModelConfig c = test_config(k);
  Model m;
  ASSERT_TRUE(m.init(c, 1, 8, 1, 2024));
  const std::string tag = std::string(k.dtype) + (k.tied ? "_tied" : "_untied");
  const std::string run = (dir / ("run_" + tag)).string(), out = (dir / (tag + ".gguf")).string();
  ASSERT_TRUE(test::save_tiny_checkpoint(m, run, 5, tok_path));
  GgufDtype dtype;
  ASSERT_TRUE(gguf_dtype_parse(k.dtype, dtype));
  GgufExportStats st;
  Status s = export_gguf(ckpt_step_dir(run, 5), out, dtype, "", &st);
  ASSERT_TRUE(s) << s.message();
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  Tokenizer tok;
  ASSERT_TRUE(Tokenizer::load(tok_path, tok));
  const BpeModel& bm = tok.model();
  const float* w = m.params();
  const ParamLayout& lay = m.layout();
  const int C = c.d_model, NH = c.n_heads, NKV = c.n_kv_heads, HS = c.head_size(), H = c.ffn_hidden,
            V = c.vocab_size, L = c.n_layers;

  // ---- the file, by the spec -----------------------------------------------------------------
  SpecFile f;
  ASSERT_TRUE(spec_parse(out, f));
  EXPECT_EQ(f.version, 3u);
  const size_t n_tensors = 2 + 9 * L + (k.tied ? 0 : 1);
  EXPECT_EQ(f.n_tensors, n_tensors);
  ASSERT_EQ(f.tensors.size(), n_tensors);
  const std::vector<std::string> keys = {
      "general.architecture", "general.name", "general.file_type", "general.quantization_version",
      "general.alignment", "llama.vocab_size", "llama.context_length", "llama.embedding_length",
      "llama.block_count", "llama.feed_forward_length", "llama.attention.head_count",
      "llama.attention.head_count_kv", "llama.rope.dimension_count", "llama.rope.freq_base",
      "llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.model", "tokenizer.ggml.pre",
      "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
      "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token",
      "tokenizer.ggml.add_eos_token"};
  EXPECT_EQ(f.n_kv, keys.size());
  std::set<std::string> got;
  for (const auto& [key, v] : f.kvs) got.insert(key);
  EXPECT_EQ(got, std::set<std::string>(keys.begin(), keys.end()));
  auto u32 = [&](const char* key, uint64_t want) {
    const SpecKv* v = f.kv(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->type, 4u) << key << " must be uint32";
    EXPECT_EQ(v->u, want) << key;
  };
  auto str = [&](const char* key, const std::string& want) {
    const SpecKv* v = f.kv(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->type, 8u) << key << " must be a string";
    EXPECT_EQ(v->s, want) << key;
  };
  auto f32 = [&](const char* key, float want) {
    const SpecKv* v = f.kv(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->type, 6u) << key << " must be float32";
    EXPECT_EQ((float)v->f, want) << key;
  };
  auto boolean = [&](const char* key, bool want) {
    const SpecKv* v = f.kv(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->type, 7u) << key << " must be bool";
    EXPECT_EQ(v->u, want ? 1u : 0u) << key;
  };
  str("general.architecture", "llama");
  EXPECT_EQ(f.kvs[0].first, "general.architecture");  // first, as llama.cpp's writers put it
  str("general.name", "run_" + tag);
  const std::string dt = k.dtype;
  u32("general.file_type", dt == "f32" ? 0 : dt == "f16" ? 1 : dt == "bf16" ? 32 : 7);  // llama.h LLAMA_FTYPE_*
  u32("general.quantization_version", 2);
  u32("general.alignment", 32);
  u32("llama.vocab_size", V);
  u32("llama.context_length", c.max_seq_len);
  u32("llama.embedding_length", C);
  u32("llama.block_count", L);
  u32("llama.feed_forward_length", H);
  u32("llama.attention.head_count", NH);
  u32("llama.attention.head_count_kv", NKV);
  u32("llama.rope.dimension_count", HS);
  f32("llama.rope.freq_base", 500000.0f);
  f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  str("tokenizer.ggml.model", "gpt2");
  str("tokenizer.ggml.pre", "gpt-2");
  u32("tokenizer.ggml.bos_token_id", 0);  // <|endoftext|>, the tokenizer's first id
  u32("tokenizer.ggml.eos_token_id", 0);
  boolean("tokenizer.ggml.add_bos_token", false);
  boolean("tokenizer.ggml.add_eos_token", false);

  // The vocabulary: id 0 the control token, 1..399 the byte-level text of each token, 400..415
  // unused placeholders; merges as "left right" of the byte-level texts, in order.
  const SpecKv* tokens = f.kv("tokenizer.ggml.tokens");
  const SpecKv* types = f.kv("tokenizer.ggml.token_type");
  const SpecKv* merges = f.kv("tokenizer.ggml.merges");
  ASSERT_TRUE(tokens && types && merges);
  EXPECT_EQ(tokens->type, 9u);
  EXPECT_EQ(tokens->elem, 8u);
  EXPECT_EQ(types->elem, 5u);  // int32
  EXPECT_EQ(merges->elem, 8u);
  ASSERT_EQ(tokens->strs.size(), (size_t)V);
  ASSERT_EQ(types->ints.size(), (size_t)V);
  ASSERT_EQ(bm.specials.size(), 1u);
  EXPECT_EQ(tokens->strs[0], "<|endoftext|>");
  EXPECT_EQ(types->ints[0], 3);
  for (int id = 1; id < V; id++) {
    if (id < 400) {
      EXPECT_EQ(tokens->strs[id], gpt2_bytes_to_text(bm.vocab[id])) << id;
      EXPECT_EQ(types->ints[id], 1) << id;
    } else {
      EXPECT_EQ(tokens->strs[id], "[PAD" + std::to_string(id) + "]");
      EXPECT_EQ(types->ints[id], 5) << id;
    }
  }
  ASSERT_EQ(merges->strs.size(), bm.merges.size());
  for (size_t i = 0; i < bm.merges.size(); i++)
    EXPECT_EQ(merges->strs[i], gpt2_bytes_to_text(bm.vocab[bm.merges[i].first]) + " " +
                                   gpt2_bytes_to_text(bm.vocab[bm.merges[i].second])) << i;

  // Tensors: llama.cpp's names in our order, ne innermost first, types, offsets packed in order
  // with each padded to 32 bytes, the data section at the header's end rounded up to 32.
  struct Want {
    std::string name;
    std::vector<uint64_t> ne;
    int64_t ours;  // float offset into m.params()
    int perm_heads;
  };
  std::vector<Want> want;
  want.push_back({"token_embd.weight", {(uint64_t)C, (uint64_t)V}, lay.wte, 0});
  for (int l = 0; l < L; l++) {
    const LayerOffsets& o = lay.layers[l];
    std::string b = "blk." + std::to_string(l) + ".";
    want.push_back({b + "attn_norm.weight", {(uint64_t)C}, o.ln1, 0});
    want.push_back({b + "attn_q.weight", {(uint64_t)C, (uint64_t)NH * HS}, o.wqkv, NH});
    want.push_back({b + "attn_k.weight", {(uint64_t)C, (uint64_t)NKV * HS}, o.wqkv + (int64_t)NH * HS * C, NKV});
    want.push_back({b + "attn_v.weight", {(uint64_t)C, (uint64_t)NKV * HS}, o.wqkv + (int64_t)(NH + NKV) * HS * C, 0});
    want.push_back({b + "attn_output.weight", {(uint64_t)NH * HS, (uint64_t)C}, o.wo, 0});
    want.push_back({b + "ffn_norm.weight", {(uint64_t)C}, o.ln2, 0});
    want.push_back({b + "ffn_gate.weight", {(uint64_t)C, (uint64_t)H}, o.wgu, 0});  // gate rows first in wgu
    want.push_back({b + "ffn_up.weight", {(uint64_t)C, (uint64_t)H}, o.wgu + (int64_t)H * C, 0});
    want.push_back({b + "ffn_down.weight", {(uint64_t)H, (uint64_t)C}, o.wdown, 0});
  }
  want.push_back({"output_norm.weight", {(uint64_t)C}, lay.lnf, 0});
  if (!k.tied) want.push_back({"output.weight", {(uint64_t)C, (uint64_t)V}, lay.lm_head, 0});
  EXPECT_EQ(f.data_start % 32, 0u);
  EXPECT_LT(f.data_start - f.header_end, 32u);
  for (uint64_t b = f.header_end; b < f.data_start; b++) EXPECT_EQ(f.bytes[b], 0) << "padding byte " << b;
  uint64_t expect_off = 0;
  for (size_t i = 0; i < want.size(); i++) {
    const SpecTensor& t = f.tensors[i];
    const Want& x = want[i];
    SCOPED_TRACE(x.name);
    EXPECT_EQ(t.name, x.name);
    EXPECT_EQ(t.ne, x.ne);
    const bool matrix = x.ne.size() == 2;
    uint32_t type = 0;  // F32
    if (matrix && dt == "f16") type = 1;
    if (matrix && dt == "bf16") type = 30;
    if (matrix && dt == "q8_0") type = x.ne[0] % 32 == 0 ? 8 : 1;  // rows not whole blocks: F16
    EXPECT_EQ(t.type, type);
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ(t.offset, expect_off);
    const uint64_t n = x.ne.size() == 2 ? x.ne[0] * x.ne[1] : x.ne[0];
    const uint64_t bytes = type == 0 ? 4 * n : type == 1 || type == 30 ? 2 * n : n / 32 * 34;
    expect_off = (t.offset + bytes + 31) / 32 * 32;
    ASSERT_LE(f.data_start + t.offset + bytes, f.bytes.size());
    const char* data = f.bytes.data() + f.data_start + t.offset;
    // The source values in GGUF row order: GGUF row r of a Q/K head = our row (r % 2) * HS/2 + r / 2.
    const uint64_t rows = matrix ? x.ne[1] : 1, cols = x.ne[0];
    std::vector<float> src(n);
    for (uint64_t r = 0; r < rows; r++) {
      uint64_t from = r;
      if (x.perm_heads) {
        uint64_t h = r / HS, j = r % HS;
        from = h * HS + (j % 2) * (HS / 2) + j / 2;
      }
      std::memcpy(&src[r * cols], w + x.ours + from * cols, 4 * cols);
    }
    int bad = 0;
    if (type == 0) {
      bad += std::memcmp(data, src.data(), 4 * n) != 0;
    } else if (type == 1) {
      for (uint64_t e = 0; e < n; e++) {
        uint16_t hb;
        std::memcpy(&hb, data + 2 * e, 2);
        // the nearest half: within half an ulp (2^-11 relative; 2^-25 absolute among subnormals)
        bad += std::fabs(half_to_float(hb) - src[e]) > std::max(std::ldexp(std::fabs(src[e]), -11), 0x1p-25f) * 1.0001f;
      }
    } else if (type == 30) {
      for (uint64_t e = 0; e < n; e++) {
        uint16_t hb;
        std::memcpy(&hb, data + 2 * e, 2);
        bad += hb != bf16_nearest(src[e]);  // the nearest bf16, bit for bit
      }
    } else {
      for (uint64_t blk = 0; blk < n / 32; blk++) {
        const char* b = data + 34 * blk;
        uint16_t hd;
        std::memcpy(&hd, b, 2);
        const float d = half_to_float(hd);
        float amax = 0;
        for (int e = 0; e < 32; e++) amax = std::max(amax, std::fabs(src[blk * 32 + e]));
        bad += std::fabs(d - amax / 127) > amax / 127 * 1e-3f;  // d = fp16(amax / 127)
        for (int e = 0; e < 32; e++) {
          const int q = (int8_t)b[2 + e];
          bad += std::abs(q - (int)std::lround(src[blk * 32 + e] / d)) > 1;
          bad += std::fabs(q * d - src[blk * 32 + e]) > 0.51f * d + 1e-3f * amax;
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
  EXPECT_EQ(f.bytes.size(), f.data_start + expect_off);  // the last tensor padded too, nothing after

  // ---- loading it back ----------------------------------------------------------------------
  // Smelt's own reader: each tensor's type and size as the spec reader found them.
  GgufReader rd;
  s = rd.open(out);
  ASSERT_TRUE(s) << s.message();
  ASSERT_EQ(rd.tensors().size(), f.tensors.size());
  std::map<std::string, int> type_counts;
  for (size_t i = 0; i < f.tensors.size(); i++) {
    const GgufTensorInfo& t = rd.tensors()[i];
    EXPECT_EQ(t.name, f.tensors[i].name);
    EXPECT_EQ(t.type, f.tensors[i].type) << t.name;
    EXPECT_EQ(t.bytes, ggml_row_bytes((GgmlType)t.type, t.ne[0]) * (t.elements() / t.ne[0])) << t.name;
    type_counts[ggml_type_name(t.type)]++;
  }
  if (dt == "bf16") {
    EXPECT_EQ(type_counts["BF16"], (int)(n_tensors - 1 - 2 * L));  // every matrix
    EXPECT_EQ(type_counts["F32"], 1 + 2 * L);                      // the norms
  }
  ModelConfig lc;
  std::vector<float> lp;
  Tokenizer lt;
  GgufModelInfo info;
  s = gguf_load_model(out, lc, lp, lt, &info);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(lc.vocab_size, V);
  EXPECT_EQ(lc.d_model, C);
  EXPECT_EQ(lc.n_layers, L);
  EXPECT_EQ(lc.n_heads, NH);
  EXPECT_EQ(lc.n_kv_heads, NKV);
  EXPECT_EQ(lc.ffn_hidden, H);
  EXPECT_EQ(lc.max_seq_len, c.max_seq_len);
  EXPECT_EQ(lc.rope_theta, 500000.0);
  EXPECT_EQ(lc.norm_eps, 1e-5);  // float32 in the file, the shortest decimal back
  EXPECT_EQ(lc.tie_embeddings, k.tied);
  EXPECT_EQ(info.file_type, dt);
  EXPECT_EQ(info.types, type_counts);
  EXPECT_EQ(info.pre, "gpt-2");
  EXPECT_EQ(lt.content_hash(), tok.content_hash());
  EXPECT_EQ(lt.vocab_size(), 400u);
  ASSERT_EQ(lp.size(), (size_t)lay.total);
  if (dt == "f32") {
    EXPECT_EQ(std::memcmp(lp.data(), w, 4 * lp.size()), 0);
  }
  // Every stored tensor re-encodes to the file's bytes: quantize(dequantize(block)) is the block.
  for (size_t i = 0; i < want.size(); i++) {
    const SpecTensor& t = f.tensors[i];
    const Want& x = want[i];
    const uint64_t rows = x.ne.size() == 2 ? x.ne[1] : 1, cols = x.ne[0], n = rows * cols;
    std::vector<float> g(n);
    for (uint64_t r = 0; r < rows; r++) {
      uint64_t from = r;
      if (x.perm_heads) from = (r / HS) * HS + (r % HS % 2) * (HS / 2) + r % HS / 2;
      std::memcpy(&g[r * cols], lp.data() + x.ours + from * cols, 4 * cols);
    }
    const char* data = f.bytes.data() + f.data_start + t.offset;
    std::string again;
    if (t.type == 0) {
      again.assign((const char*)g.data(), 4 * n);
    } else if (t.type == 1) {
      for (float v : g) {
        uint16_t hb = fp16_from_f32(v);
        again.append((const char*)&hb, 2);
      }
    } else if (t.type == 30) {
      std::vector<uint16_t> hb(n);
      bf16_from_f32_serial(hb.data(), g.data(), (int64_t)n);
      again.assign((const char*)hb.data(), 2 * n);
    } else {
      std::vector<BlockQ8_0> q(n / 32);
      quantize_row_q8_0(q.data(), g.data(), (int64_t)n);
      again.assign((const char*)q.data(), 34 * q.size());
    }
    EXPECT_EQ(std::memcmp(again.data(), data, again.size()), 0) << x.name << " re-encoded differs";
  }

  // ---- logits on real text through the KV-cache decoder ---------------------------------------
  const std::vector<int32_t> prompt = real_text_ids(tok, 40);
  ASSERT_EQ(prompt.size(), 40u);
  InferenceSession sa, sb;
  ASSERT_TRUE(sa.init(c, w, 56, 1));
  ASSERT_TRUE(sb.init(lc, lp.data(), 56, 1));
  std::vector<float> la(V), lb(V);
  ASSERT_TRUE(sa.prefill(prompt.data(), (int)prompt.size(), la.data()));
  ASSERT_TRUE(sb.prefill(prompt.data(), (int)prompt.size(), lb.data()));
  double err = 0, scale = 1;
  int same_top = 0;
  for (int step = 0; step < 16; step++) {
    int ta = 0, tb = 0;
    for (int v = 0; v < V; v++) {
      err = std::max(err, (double)std::fabs(la[v] - lb[v]));
      scale = std::max(scale, (double)std::fabs(la[v]));
      if (la[v] > la[ta]) ta = v;
      if (lb[v] > lb[tb]) tb = v;
    }
    same_top += ta == tb;
    if (dt == "f32") {
      ASSERT_EQ(std::memcmp(la.data(), lb.data(), 4 * V), 0) << "step " << step;
    }
    ASSERT_TRUE(sa.step(ta, la.data()));  // both follow the checkpoint's greedy path
    ASSERT_TRUE(sb.step(ta, lb.data()));
  }
  const double rel = err / scale, tol = gguf_check_tolerance(dt);
  std::printf("[%s %s] %.2f MiB, logits max|diff| %.3g (%.2e of max(1, max|logit|) %.2f; tolerance %.0e), "
              "same top-1 at %d/16 steps\n", dt.c_str(), k.tied ? "tied" : "untied", st.bytes / 1048576.0, err,
              rel, scale, tol, same_top);
  EXPECT_LE(rel, tol);
  if (dt == "f32") {
    EXPECT_EQ(err, 0.0);
  }

  // export_gguf_check agrees.
  double d = -1, r = -1;
  std::string ft;
  s = export_gguf_check(ckpt_step_dir(run, 5), out, &d, &r, &ft);
  EXPECT_TRUE(s) << s.message();
  EXPECT_EQ(ft, dt);
}

TEST_F(Gguf, F32UntiedFfnNotWholeBlocks) { check_export(dir_, tok_path_, {"f32", false, 80}); }
TEST_F(Gguf, F16UntiedFfnNotWholeBlocks) { check_export(dir_, tok_path_, {"f16", false, 80}); }
TEST_F(Gguf, Bf16UntiedFfnNotWholeBlocks) { check_export(dir_, tok_path_, {"bf16", false, 80}); }
TEST_F(Gguf, Q8UntiedFfnFallsBackToF16) { check_export(dir_, tok_path_, {"q8_0", false, 80}); }
TEST_F(Gguf, F32Tied) { check_export(dir_, tok_path_, {"f32", true, 96}); }
TEST_F(Gguf, F16Tied) { check_export(dir_, tok_path_, {"f16", true, 96}); }
TEST_F(Gguf, Bf16Tied) { check_export(dir_, tok_path_, {"bf16", true, 96}); }
TEST_F(Gguf, Q8Tied) { check_export(dir_, tok_path_, {"q8_0", true, 96}); }

TEST(GgufPermute, InverseUndoesForwardAndPairsAdjacent) {
  // One head of HS 8 over 1 column: ours [a0..a3 | b0..b3] (pairs ai, bi) -> [a0 b0 a1 b1 ...].
  std::vector<float> w = {0, 1, 2, 3, 10, 11, 12, 13};
  gguf_permute_rope_rows(w.data(), 1, 8, 1, false);
  EXPECT_EQ(w, (std::vector<float>{0, 10, 1, 11, 2, 12, 3, 13}));
  gguf_permute_rope_rows(w.data(), 1, 8, 1, true);
  EXPECT_EQ(w, (std::vector<float>{0, 1, 2, 3, 10, 11, 12, 13}));
}

TEST(GgufPreName, LlamaCppNamesForOurPatterns) {
  EXPECT_EQ(gguf_pre_name("gpt2", false), "gpt-2");
  EXPECT_EQ(gguf_pre_name("llama3", true), "llama-bpe");
  EXPECT_EQ(gguf_pre_name("llama3", false), "dbrx");
  EXPECT_EQ(gguf_pre_name("qwen2", false), "qwen2");
  EXPECT_EQ(gguf_pre_name("o200k", false), "gpt-4o");
  EXPECT_EQ(gguf_pre_name("regex", false), "");
}

// Every metadata type through GgufWriter and GgufReader (the spec reader checks the bytes).
TEST(GgufFormat, EveryValueTypeRoundTrips) {
  const std::string path = (fs::temp_directory_path() / ("smelt_gguf_kv_" + std::to_string(getpid()))).string();
  GgufWriter w;
  w.add_string("general.architecture", "test");
  w.add_u32("a.u32", 4000000000u);
  w.add_i32("a.i32", -7);
  w.add_u64("a.u64", 1ull << 40);
  w.add_f32("a.f32", 0.25f);
  w.add_bool("a.bool", true);
  w.add_strings("a.strs", {"x", "", "ünï"});
  w.add_i32s("a.ints", {1, -2, 3});
  w.add_f32s("a.flts", {0.5f, -1.5f});
  w.add_tensor("t.f32", {3, 2}, GgmlType::kF32);
  w.add_tensor("t.q8", {32}, GgmlType::kQ8_0);
  ASSERT_TRUE(w.open(path));
  float t1[6] = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(w.write_tensor(t1, 24));
  char q[34] = {};
  EXPECT_FALSE(w.write_tensor(q, 33));  // the wrong size is refused
  ASSERT_TRUE(w.write_tensor(q, 34));
  ASSERT_TRUE(w.finish());

  SpecFile f;
  ASSERT_TRUE(spec_parse(path, f));
  EXPECT_EQ(f.kv("a.u32")->type, 4u);
  EXPECT_EQ(f.kv("a.u32")->u, 4000000000u);
  EXPECT_EQ(f.kv("a.i32")->type, 5u);
  EXPECT_EQ(f.kv("a.i32")->i, -7);
  EXPECT_EQ(f.kv("a.u64")->type, 10u);
  EXPECT_EQ(f.kv("a.f32")->type, 6u);
  EXPECT_EQ(f.kv("a.bool")->type, 7u);
  EXPECT_EQ(f.kv("a.strs")->strs, (std::vector<std::string>{"x", "", "ünï"}));
  EXPECT_EQ(f.kv("a.ints")->elem, 5u);
  EXPECT_EQ(f.kv("a.ints")->ints, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.kv("a.flts")->elem, 6u);
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[1].offset, 32u);  // 24 bytes padded to 32
  EXPECT_EQ(f.bytes.size(), f.data_start + 32 + 64);
  EXPECT_EQ(f.kvs.back().first, "general.alignment");  // added by open() when not given

  GgufReader r;
  Status s = r.open(path);
  ASSERT_TRUE(s) << s.message();
  uint32_t u = 0;
  float fl = 0;
  bool b = false;
  const std::vector<std::string>* strs = nullptr;
  const std::vector<int64_t>* ints = nullptr;
  EXPECT_TRUE(r.get_u32("a.u32", u));
  EXPECT_EQ(u, 4000000000u);
  EXPECT_TRUE(r.get_f32("a.f32", fl));
  EXPECT_EQ(fl, 0.25f);
  EXPECT_TRUE(r.get_bool("a.bool", b));
  EXPECT_TRUE(b);
  EXPECT_TRUE(r.get_strings("a.strs", strs));
  EXPECT_EQ(*strs, f.kv("a.strs")->strs);
  EXPECT_TRUE(r.get_ints("a.ints", ints));
  EXPECT_EQ(*ints, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_FALSE(r.get_u32("a.i32", u));  // negative
  std::string not_a_string;
  s = r.get_string("a.u32", not_a_string);
  EXPECT_NE(s.message().find("a.u32 is uint32, expected string"), std::string::npos) << s.message();
  EXPECT_EQ(r.tensors()[1].file_offset, r.data_offset() + 32);
  EXPECT_EQ(std::memcmp(r.tensor_data(r.tensors()[0]), t1, 24), 0);
  fs::remove(path);
}

// Damaged and foreign files: the reader and the loader say where and what.
TEST_F(Gguf, RefusalsNameTheFileTheOffsetAndWhatWasExpected) {
  const ModelConfig c = test_config({"f32", true, 96});
  Model m;
  ASSERT_TRUE(m.init(c, 1, 8, 1, 7));
  const std::string run = (dir_ / "run_bad").string(), good = (dir_ / "good.gguf").string();
  ASSERT_TRUE(test::save_tiny_checkpoint(m, run, 1, tok_path_));
  ASSERT_TRUE(export_gguf(ckpt_step_dir(run, 1), good, GgufDtype::kF32));
  const std::string bytes = slurp(good);
  auto variant = [&](const std::string& name, const std::string& b) {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << b;
    return p;
  };
  auto load_error = [&](const std::string& p) {
    ModelConfig lc;
    std::vector<float> lp;
    Tokenizer lt;
    Status s = gguf_load_model(p, lc, lp, lt);
    EXPECT_FALSE(s) << p;
    EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
    return s.message();
  };
  std::string b = bytes;
  b[0] = 'X';
  EXPECT_NE(load_error(variant("magic.gguf", b)).find("byte 0: magic"), std::string::npos);
  b = bytes;
  b[4] = 2;
  EXPECT_NE(load_error(variant("v2.gguf", b)).find("byte 4: version 2, expected 3"), std::string::npos);
  std::string e = load_error(variant("short.gguf", bytes.substr(0, bytes.size() / 2)));
  EXPECT_NE(e.find("run past the end"), std::string::npos) << e;
  e = load_error(variant("header.gguf", bytes.substr(0, 200)));
  EXPECT_NE(e.find("byte "), std::string::npos) << e;

  // A tensor offset off the alignment / out of order: patch the first tensor info's offset.
  SpecFile f;
  ASSERT_TRUE(spec_parse(good, f));
  const std::string first = f.tensors[0].name;
  size_t at = bytes.find(first, 0);
  while (at != std::string::npos && bytes.compare(at - 8, 8, std::string("\x11\0\0\0\0\0\0\0", 8)) != 0)
    at = bytes.find(first, at + 1);  // "token_embd.weight" (17 bytes) after its length
  ASSERT_NE(at, std::string::npos);
  size_t off_at = at + first.size() + 4 + 8 * 2 + 4;  // n_dims, ne[2], type
  b = bytes;
  b[off_at] = 8;
  e = load_error(variant("misaligned.gguf", b));
  EXPECT_NE(e.find("offset 8 is not a multiple of the alignment 32"), std::string::npos) << e;
  b = bytes;
  b[off_at] = 64;
  e = load_error(variant("gap.gguf", b));
  EXPECT_NE(e.find("token_embd.weight: offset 64, expected 0"), std::string::npos) << e;

  // Foreign files written with our writer: another architecture, a tensor type Smelt lacks.
  {
    GgufWriter w;
    w.add_string("general.architecture", "gpt2");
    w.add_tensor("token_embd.weight", {4, 4}, GgmlType::kF32);
    std::string p = (dir_ / "gpt2.gguf").string();
    ASSERT_TRUE(w.open(p));
    std::vector<float> z(16);
    ASSERT_TRUE(w.write_tensor(z.data(), 64));
    ASSERT_TRUE(w.finish());
    e = load_error(p);
    EXPECT_NE(e.find("general.architecture is 'gpt2'; Smelt imports 'llama', 'qwen2' and 'qwen3'"), std::string::npos) << e;
  }
  {
    // Change attn_norm of layer 0 to Q4_K (type 12): the reader cannot size it, the loader refuses it.
    b = bytes;
    const std::string nm = "blk.0.attn_norm.weight";
    size_t p = b.find(nm);
    ASSERT_NE(p, std::string::npos);
    size_t type_at = p + nm.size() + 4 + 8;  // n_dims (1), ne[0]
    b[type_at] = 12;
    e = load_error(variant("q4k.gguf", b));
    EXPECT_NE(e.find("tensor blk.0.attn_norm.weight is Q4_K; Smelt imports F32, F16, BF16 and Q8_0"), std::string::npos) << e;
  }
  {
    // The pre-tokenizer key renamed: the pre-tokenizer is gone and an unknown tokenizer key is
    // there, which is refused first, by name (a key Smelt does not read may change tokenization).
    b = bytes;
    size_t p = b.find("tokenizer.ggml.pre");
    ASSERT_NE(p, std::string::npos);
    b[p + 15] = 'X';  // "tokenizer.ggml.Xre": the key is gone, the layout unchanged
    e = load_error(variant("nopre.gguf", b));
    EXPECT_NE(e.find("tokenizer.ggml.Xre is not one Smelt's import reads"), std::string::npos) << e;
  }
}

// The command line: --format gguf --dtype q8_0 --check --json, and the usage errors (an unknown
// --dtype names the choices).
TEST_F(Gguf, ExportCommandChecksAndReports) {
  std::string run, out;
  test::CmdResult r = export_checked("q8_0", 11, run, out);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  expect_checked(j, "Q8_0");
  EXPECT_EQ(j["pre"], "gpt-2");
  EXPECT_EQ(j["bytes"].get<int64_t>(), (int64_t)fs::file_size(out));
  EXPECT_NE(r.err.find("[export]"), std::string::npos);
  r = test::run_smelt("export --checkpoint " + run + " --format gguf --dtype q4 --output x.gguf", dir_);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--dtype q4: expected f32, bf16, f16 or q8_0"), std::string::npos) << r.err;
  EXPECT_EQ(test::run_smelt("export --checkpoint " + run + " --format hf --dtype f16 --output x", dir_).rc, 2);

  // generate --gguf continues exactly as generate --checkpoint for an f32 file.
  const std::string f32 = (dir_ / "cli" / "model-f32.gguf").string();
  ASSERT_EQ(test::run_smelt("export --checkpoint " + run + " --format gguf --output " + f32, dir_).rc, 0);
  const std::string args = " --prompt 'static int 你好' --temperature 0 --max-new-tokens 12 --ignore-eos --json";
  test::CmdResult a = test::run_smelt("generate --checkpoint " + run + args, dir_);
  test::CmdResult g = test::run_smelt("generate --gguf " + f32 + args, dir_);
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["ids"], nlohmann::json::parse(g.out)["ids"]);
  EXPECT_EQ(nlohmann::json::parse(g.out)["gguf"], f32);
  EXPECT_EQ(test::run_smelt("generate --gguf " + f32 + " --checkpoint " + run + " --prompt hi", dir_).rc, 2);
}

// --dtype bf16 through the command line: matrices BF16, norms F32, --check passed within the bf16
// tolerance.
TEST_F(Gguf, ExportCommandBf16Checks) {
  std::string run, out;
  test::CmdResult r = export_checked("bf16", 13, run, out);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["dtype"], "bf16");
  expect_checked(j, "BF16");
  EXPECT_EQ(j["types"].size(), 2u);
  EXPECT_LE(j["check_rel_diff"].get<double>(), gguf_check_tolerance("bf16"));
  std::printf("bf16 --check: logits within %.2e of max(1, max|logit|)\n", j["check_rel_diff"].get<double>());
}

TEST(GgufDtype, ParsesEachNameAndRefusalsNameTheChoices) {
  const std::pair<const char*, const char*> names[] = {{"f32", "f32"}, {"fp32", "f32"}, {"bf16", "bf16"},
                                                       {"f16", "f16"}, {"fp16", "f16"}, {"q8_0", "q8_0"}};
  for (const auto& [in, want] : names) {
    GgufDtype d = GgufDtype::kQ8_0;
    ASSERT_TRUE(gguf_dtype_parse(in, d)) << in;
    EXPECT_STREQ(gguf_dtype_name(d), want) << in;
  }
  GgufDtype d = GgufDtype::kF32;
  ASSERT_TRUE(gguf_dtype_parse("bf16", d));
  EXPECT_EQ(d, GgufDtype::kBf16);
  for (const char* bad : {"BF16", "bfloat16", "q4", ""}) {
    Status s = gguf_dtype_parse(bad, d);
    EXPECT_FALSE(s) << bad;
    EXPECT_EQ(s.message(), std::string("--dtype ") + bad + ": expected f32, bf16, f16 or q8_0");
  }
  EXPECT_EQ(ggml_type_name(30), "BF16");
  EXPECT_EQ(ggml_row_bytes(GgmlType::kBf16, 80), 160);
  // bf16 keeps 8 mantissa bits to f16's 11: its --check bound lies between f16's and q8_0's.
  EXPECT_GT(gguf_check_tolerance("bf16"), gguf_check_tolerance("f16"));
  EXPECT_LE(gguf_check_tolerance("bf16"), gguf_check_tolerance("q8_0"));
}

// Streaming: exporting a ~58 MB model to q8_0 adds about the largest tensor (two conversion buffers)
// to the process's peak RSS, not the model.
TEST_F(Gguf, PeakMemoryStaysNearTheLargestTensor) {
  ModelConfig c;
  c.vocab_size = 8192;
  c.d_model = 256;
  c.n_layers = 12;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.ffn_hidden = 704;
  c.max_seq_len = 64;
  c.tie_embeddings = false;
  ParamLayout layout = param_layout(c);
  std::vector<float> params((size_t)layout.total);
  for (size_t i = 0; i < params.size(); i++) params[i] = (float)((int)((i * 2654435761u) % 1001) - 500) * 1e-4f;
  const std::string big = (dir_ / "big").string();
  ASSERT_TRUE(test::save_checkpoint_params(c, params.data(), big, 1, tok_path_));
  params = {};
  const double model_mib = layout.total * 4.0 / 1048576.0, largest_mib = 8192.0 * 256 * 4 / 1048576.0;
  Model tiny_m;
  ASSERT_TRUE(tiny_m.init(test_config({"q8_0", true, 96}), 1, 8, 1, 1));
  const std::string small = (dir_ / "small").string();
  ASSERT_TRUE(test::save_tiny_checkpoint(tiny_m, small, 1, tok_path_));
  auto peak = [&](const std::string& run, const std::string& out) {
    test::CmdResult x = test::run_smelt("export --json --format gguf --dtype q8_0 --checkpoint " + run + " --output " +
                                            (dir_ / out).string(), dir_);
    EXPECT_EQ(x.rc, 0) << x.err;
    return x.rc == 0 ? nlohmann::json::parse(x.out)["peak_rss_bytes"].get<double>() / 1048576.0 : -1.0;
  };
  const double base = peak(small, "small.gguf"), top = peak(big, "big.gguf");
  ASSERT_GT(base, 0);
  ASSERT_GT(top, 0);
  std::printf("model %.1f MiB, largest tensor %.1f MiB; q8_0 export peak RSS %.1f MiB (baseline %.1f, +%.1f MiB)\n",
              model_mib, largest_mib, top, base, top - base);
  EXPECT_LT(top - base, 2.5 * largest_mib);
  EXPECT_LT(top - base, 0.4 * model_mib);
}

}  // namespace
