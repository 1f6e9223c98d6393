// GGUF import (import_gguf.hpp): one table of tensor names (llama.cpp's -> ours, the Hugging Face
// ones), the inverse of convert_hf_to_gguf.py's Q/K row permutation for the llama architecture
// (llama.cpp rotates adjacent pairs there, we rotate i with i + HS/2 as HF does; qwen2 and qwen3
// use NEOX RoPE, already our order), rope_freqs.weight read back into the llama3 scaling it was computed
// from, and the vocabulary turned back from GPT-2's byte-level alphabet. Not the export's loader
// (export_gguf.cpp's gguf_load_model, which generate, serve and the perplexity scorer use, is this import without the checkpoint).
#include "smelt/ckpt/import_gguf.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <unordered_map>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/export_gguf.hpp"
#include "smelt/ckpt/gguf.hpp"
#include "smelt/ckpt/import_hf.hpp"
#include "smelt/common/config.hpp"
#include "smelt/kernels/decode_linear.hpp"
#include "smelt/model/params.hpp"
#include "smelt/tokenizer/byte_level.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {

namespace {

// llama.cpp token types (llama.h LLAMA_TOKEN_TYPE_*).
constexpr int64_t kTokNormal = 1, kTokControl = 3, kTokUserDefined = 4, kTokUnused = 5;

// The {arch}.* keys read; any other one may change the model (experts, sliding windows, soft caps,
// YaRN's attention factor, ...) and is refused.
const std::set<std::string> kArchKeys = {
    "context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "rope.freq_base", "attention.layer_norm_rms_epsilon", "rope.dimension_count",
    "attention.key_length", "attention.value_length", "vocab_size", "rope.scaling.type", "rope.scaling.factor"};
// tokenizer.ggml.* keys read or harmless (ids of roles, scores a BPE vocabulary does not use).
const std::set<std::string> kTokenizerKeys = {
    "model", "pre", "tokens", "token_type", "merges", "scores", "add_bos_token", "add_eos_token",
    "add_sep_token", "add_space_prefix", "token_type_count"};

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The float a file stores as its shortest decimal (1e-5f -> 1e-5), so configs compare equal.
double shortest(float f) { return std::stod(fmt::format("{}", f)); }

// One tensor -> fp32 (n values).
void dequantize(const GgufTensorInfo& g, const uint8_t* data, float* out, int64_t n) {
  if (g.type == (uint32_t)GgmlType::kF32) {
    std::memcpy(out, data, 4 * n);
  } else if (g.type == (uint32_t)GgmlType::kF16) {
    for (int64_t k = 0; k < n; k++) {
      uint16_t h;
      std::memcpy(&h, data + 2 * k, 2);
      out[k] = f32_from_fp16(h);
    }
  } else if (g.type == (uint32_t)GgmlType::kBf16) {
    for (int64_t k = 0; k < n; k++) {
      uint16_t h;
      std::memcpy(&h, data + 2 * k, 2);
      const uint32_t bits = (uint32_t)h << 16;
      std::memcpy(out + k, &bits, 4);
    }
  } else {
    dequantize_row_q8_0(out, reinterpret_cast<const BlockQ8_0*>(data), n);
  }
}

// rope_freqs.weight (HS/2 factors f_i; llama.cpp divides frequency i by f_i), as convert_hf_to_gguf.py
// computes it from Hugging Face's llama3 rope_scaling: f = 1 where the wavelength 2pi/freq is below
// original / high_freq_factor, factor above original / low_freq_factor, 1 / ((1 - s) / factor + s)
// between (s = (original / wavelength - low) / (high - low)). The file keeps only f, so the factor is
// the largest f, low and high are Llama 3.1-3.3's 1 and 4, and the original context comes from the
// blended f (else the range the others allow, 8192 or a power of two); the config is accepted only
// when rope_inv_freq reproduces base / f for every i.
Status rope_from_factors(const std::string& path, const float* ff, ModelConfig& c, double& max_rel, std::string& how) {
  ModelConfig plain = c;
  plain.rope_scaling = RopeScaling::kNone;
  const std::vector<double> base = rope_inv_freq(plain);
  const int n = (int)base.size();
  bool ones = true;
  for (int i = 0; i < n; i++) ones &= ff[i] == 1.0f;
  max_rel = 0;
  if (ones) {
    how = "rope_freqs.weight all 1: plain";
    return Status::ok();
  }
  const double factor = ff[n - 1], lo = 1.0, hi = 4.0;
  std::vector<double> olds;
  double lower = 0, upper = 1e300;  // original context: hi * wavelength < it for f = 1, it < lo * wavelength for f = factor
  for (int i = 0; i < n; i++) {
    const double f = ff[i], wavelen = 2 * M_PI / base[i];
    if (f == 1.0) lower = std::max(lower, hi * wavelen);
    else if (f == factor) upper = std::min(upper, lo * wavelen);
    else if (factor > 1 && f > 1 && f < factor)
      olds.push_back((lo + (1 / f - 1 / factor) / (1 - 1 / factor) * (hi - lo)) * wavelen);
  }
  double old = 0;
  if (!olds.empty()) {
    std::sort(olds.begin(), olds.end());
    old = std::round(olds[olds.size() / 2]);
  } else if (lower < 8192 && 8192 < upper) {
    old = 8192;
  } else {
    for (double p = 1; p < 1e9 && old == 0; p *= 2)
      if (lower < p && p < upper) old = p;
  }
  const auto refuse = [&](const std::string& why) {
    return Status::error(fmt::format("{}: tensor rope_freqs.weight (RoPE frequency factors [{}]) {}; Smelt reads it "
                                     "as Llama 3.1's llama3 rope scaling only (docs/import.md)", path,
                                     fmt::join(ff, ff + n, ", "), why));
  };
  if (factor < 1 || old < 1 || old > (1 << 30)) return refuse("matches no llama3 scaling (factor, original context)");
  ModelConfig s = c;
  s.rope_scaling = RopeScaling::kLlama3;
  s.rope_factor = factor;
  s.rope_low_freq_factor = lo;
  s.rope_high_freq_factor = hi;
  s.rope_original_max_seq_len = (int)old;
  const std::vector<double> got = rope_inv_freq(s);
  for (int i = 0; i < n; i++) max_rel = std::max(max_rel, std::fabs(got[i] * ff[i] / base[i] - 1));
  // convert computes the factors from fp32 frequencies and stores them as fp32: a few ulps at the
  // blend's steep end (x factor).
  constexpr double kRel = 1e-5;
  if (!(max_rel <= kRel))
    return refuse(fmt::format("differs from llama3 scaling factor {}, low_freq_factor {}, high_freq_factor {}, "
                              "original_max_position_embeddings {} by {:.3g} (relative; allowed {})", factor, lo, hi,
                              old, max_rel, kRel));
  c = s;
  how = fmt::format("rope_freqs.weight -> llama3 (factor {}, low_freq_factor {}, high_freq_factor {}, "
                    "original_max_position_embeddings {}; max relative frequency difference {:.2g})", factor, lo,
                    hi, old, max_rel);
  return Status::ok();
}

// tokenizer.ggml.* -> tok, and the token roles into info.tokens.
Status tokenizer_from_file(const GgufReader& r, int V, Tokenizer& tok, GgufImportInfo& info) {
  const std::string& path = r.path();
  std::string model;
  if (Status s = r.get_string("tokenizer.ggml.model", model); !s) return s;
  if (model != "gpt2")
    return Status::error(fmt::format("{}: tokenizer.ggml.model is '{}'{}; Smelt imports byte-level BPE tokenizers "
                                     "('gpt2') only", path, model,
                                     model == "llama" ? " (a SentencePiece vocabulary)" : ""));
  for (const auto& k : r.keys())
    if (k.rfind("tokenizer.ggml.", 0) == 0) {
      const std::string rest = k.substr(15);
      if (!kTokenizerKeys.count(rest) && !ends_with(rest, "_token_id"))
        return Status::error(fmt::format("{}: metadata key {} is not one Smelt's import reads; it may change how "
                                         "text is tokenized", path, k));
    }
  bool space_prefix = false;
  if (Status s = r.get_bool("tokenizer.ggml.add_space_prefix", space_prefix, false); !s) return s;
  if (space_prefix)
    return Status::error(fmt::format("{}: tokenizer.ggml.add_space_prefix is true; Smelt's byte-level BPE adds no "
                                     "space before the text", path));
  std::string pre;
  if (!r.find("tokenizer.ggml.pre"))
    return Status::error(fmt::format("{}: no tokenizer.ggml.pre; llama.cpp would use its 'default' pre-tokenizer, "
                                     "which Smelt does not have", path));
  if (Status s = r.get_string("tokenizer.ggml.pre", pre); !s) return s;
  BpeModel m;
  // The flags llama.cpp's llama-vocab.cpp attaches to each name.
  if (pre == "gpt-2") m.pretokenizer = "gpt2";
  else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    m.pretokenizer = "llama3";
    m.ignore_merges = true;
  } else if (pre == "dbrx" || pre == "smaug-bpe") m.pretokenizer = "llama3";
  else if (pre == "qwen2") m.pretokenizer = "qwen2";
  else if (pre == "gpt-4o") m.pretokenizer = "o200k";
  else
    return Status::error(fmt::format("{}: tokenizer.ggml.pre '{}' is not a pre-tokenizer Smelt has (gpt-2, "
                                     "llama-bpe, dbrx, smaug-bpe, qwen2, gpt-4o)", path, pre));
  info.pre = pre;
  const std::vector<std::string>* tokens = nullptr;
  const std::vector<std::string>* merges = nullptr;
  const std::vector<int64_t>* types = nullptr;
  if (Status s = r.get_strings("tokenizer.ggml.tokens", tokens); !s) return s;
  if (Status s = r.get_strings("tokenizer.ggml.merges", merges); !s) return s;
  if ((int)tokens->size() != V)
    return Status::error(fmt::format("{}: tokenizer.ggml.tokens has {} entries, token_embd.weight {} rows", path,
                                     tokens->size(), V));
  if (r.find("tokenizer.ggml.token_type")) {
    if (Status s = r.get_ints("tokenizer.ggml.token_type", types); !s) return s;
    if (types->size() != tokens->size())
      return Status::error(fmt::format("{}: tokenizer.ggml.token_type has {} entries, tokens {}", path,
                                       types->size(), tokens->size()));
  }
  m.vocab.resize(tokens->size());
  std::unordered_map<std::string, uint32_t> id_of;
  id_of.reserve(tokens->size() * 2);
  size_t last = 0;  // one past the last id that is not an UNUSED placeholder
  for (size_t id = 0; id < tokens->size(); id++) {
    const std::string& t = (*tokens)[id];
    const int64_t type = types ? (*types)[id] : kTokNormal;
    if (type == kTokNormal) {
      std::string raw;
      if (!byte_level_decode(t, raw)) raw = t;  // outside the alphabet: its UTF-8 text, as a tokenizer.json load does
      m.vocab[id] = raw;
      id_of.emplace(t, (uint32_t)id);
    } else if (type == kTokControl || type == kTokUserDefined) {
      m.vocab[id] = t;
      m.specials.push_back({t, (uint32_t)id, type == kTokControl});
    } else if (type != kTokUnused) {
      return Status::error(fmt::format("{}: tokenizer.ggml.token_type[{}] = {} (token '{}'); a byte-level BPE "
                                       "vocabulary has normal (1), control (3), user-defined (4) and unused (5) "
                                       "tokens", path, id, type, t));
    }
    if (type != kTokUnused) last = id + 1;
  }
  m.vocab.resize(last);
  m.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); i++) {
    const std::string& s = (*merges)[i];
    const size_t sp = s.find(' ', 1);
    auto a = sp == std::string::npos ? id_of.end() : id_of.find(s.substr(0, sp));
    auto b = sp == std::string::npos ? id_of.end() : id_of.find(s.substr(sp + 1));
    if (a == id_of.end() || b == id_of.end())
      return Status::error(fmt::format("{}: tokenizer.ggml.merges[{}] = '{}': expected two normal tokens separated "
                                       "by a space", path, i, s));
    m.merges.emplace_back(a->second, b->second);
  }
  m.info = {{"source", path}, {"format", "gguf"}, {"tokenizer.ggml.pre", pre}};
  // Roles: ids as the file gives them, with their text.
  json t = json::object();
  for (const char* role : {"bos", "eos", "padding", "unknown", "eot"}) {
    const std::string key = fmt::format("tokenizer.ggml.{}_token_id", role);
    uint32_t id = 0;
    const bool has = r.find(key) != nullptr;
    if (has)
      if (Status s = r.get_u32(key, id); !s) return s;
    if (has && id >= tokens->size())
      return Status::error(fmt::format("{}: {} = {} is past the vocabulary ({} tokens)", path, key, id,
                                       tokens->size()));
    const std::string name = std::string(role) == "padding" ? "pad" : role;
    t[name + "_token_id"] = has ? json(id) : json(nullptr);
    t[name + "_token"] = has ? json((*tokens)[id]) : json(nullptr);
  }
  for (const char* k : {"add_bos_token", "add_eos_token"}) {
    bool v = false;
    const std::string key = std::string("tokenizer.ggml.") + k;
    if (!r.find(key)) {
      t[k] = nullptr;
      continue;
    }
    if (Status s = r.get_bool(key, v); !s) return s;
    t[k] = v;
  }
  std::string chat;
  if (r.find("tokenizer.chat_template")) {
    if (Status s = r.get_string("tokenizer.chat_template", chat); !s) return s;
    t["chat_template"] = chat;
  } else {
    t["chat_template"] = nullptr;
  }
  info.tokens = t;
  if (Status s = Tokenizer::from_model(std::move(m), tok); !s)
    return Status::error(fmt::format("{}: tokenizer: {}", path, s.message()));
  return Status::ok();
}

// general.architecture, one Smelt reads, with no {arch}.* key it does not read.
Status read_architecture(const GgufReader& r, const std::string& path, GgufImportInfo& info) {
  if (Status s = r.get_string("general.architecture", info.architecture); !s) return s;
  const std::string& arch = info.architecture;
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3")
    return Status::error(fmt::format("{}: general.architecture is '{}'; Smelt imports 'llama', 'qwen2' and 'qwen3' "
                                     "GGUF files (import the Hugging Face checkpoint with --hf for the others it has)",
                                     path, arch));
  for (const auto& k : r.keys())
    if (k.rfind(arch + ".", 0) == 0 && !kArchKeys.count(k.substr(arch.size() + 1)))
      return Status::error(fmt::format("{}: metadata key {} is not one Smelt's import reads; it may change what the "
                                       "model computes", path, k));
  return Status::ok();
}

// The sizes, the head size (attention.key_length where it is not d_model / heads), RoPE's base and
// the norm's epsilon -> c (from a fresh ModelConfig).
Status read_sizes(const GgufReader& r, const std::string& path, const std::string& arch, int max_seq_len,
                  ModelConfig& c, GgufImportInfo& info) {
  const auto key = [&](const char* k) { return arch + "." + k; };
  uint32_t ctx = 0, C = 0, L = 0, H = 0, NH = 0;
  float theta = 10000.0f, eps = 0;
  for (auto [k, out] : {std::pair{"context_length", &ctx}, {"embedding_length", &C}, {"block_count", &L},
                        {"feed_forward_length", &H}, {"attention.head_count", &NH}})
    if (Status s = r.get_u32(key(k), *out); !s) return s;
  uint32_t NKV = NH;
  if (Status s = r.get_u32(key("attention.head_count_kv"), NKV, false); !s) return s;
  if (Status s = r.get_f32(key("rope.freq_base"), theta, false); !s) return s;
  if (Status s = r.get_f32(key("attention.layer_norm_rms_epsilon"), eps); !s) return s;
  if (NH == 0) return Status::error(fmt::format("{}: {} is 0", path, key("attention.head_count")));
  uint32_t HS = C / NH;
  const bool explicit_hs = r.find(key("attention.key_length")) != nullptr;
  if (explicit_hs) {
    if (Status s = r.get_u32(key("attention.key_length"), HS); !s) return s;
  } else if (C % NH != 0) {
    return Status::error(fmt::format("{}: {} {} is not a multiple of {} {} (and no {})", path,
                                     key("embedding_length"), C, key("attention.head_count"), NH,
                                     key("attention.key_length")));
  }
  for (const char* k : {"attention.value_length", "rope.dimension_count"}) {
    uint32_t v = HS;
    if (Status s = r.get_u32(key(k), v, false); !s) return s;
    if (v != HS)
      return Status::error(fmt::format("{}: {} is {}, the head size is {}; Smelt {}", path, key(k), v, HS,
                                       std::string(k) == "rope.dimension_count"
                                           ? "rotates whole heads (no partial rotary)"
                                           : "has values of the key's size"));
  }
  c = ModelConfig{};
  c.d_model = (int)C;
  c.n_layers = (int)L;
  c.n_heads = (int)NH;
  c.n_kv_heads = (int)NKV;
  c.ffn_hidden = (int)H;
  c.head_dim = explicit_hs && HS * NH != C ? (int)HS : 0;
  info.context_length = (int)ctx;
  c.max_seq_len = (int)std::min<uint32_t>(ctx, (uint32_t)std::max(1, max_seq_len));
  c.rope_theta = shortest(theta);
  c.norm_eps = shortest(eps);
  return Status::ok();
}

// What the tensors and the architecture say: the vocabulary (token_embd.weight's rows, which
// {arch}.vocab_size must match), a tied head (no output.weight), the q/k/v biases (qwen2 has them,
// llama may) and QK-norm (qwen3's attn_q_norm / attn_k_norm, without biases).
Status read_tensor_config(const GgufReader& r, const std::string& path, const std::string& arch, ModelConfig& c) {
  const GgufTensorInfo* emb = r.find_tensor("token_embd.weight");
  if (!emb || emb->ne.size() != 2)
    return Status::error(fmt::format("{}: no 2-D tensor token_embd.weight", path));
  c.vocab_size = (int)emb->ne[1];
  uint32_t nv = (uint32_t)c.vocab_size;
  if (Status s = r.get_u32(arch + ".vocab_size", nv, false); !s) return s;
  if ((int)nv != c.vocab_size)
    return Status::error(fmt::format("{}: {}.vocab_size {} but token_embd.weight has {} rows", path, arch, nv,
                                     c.vocab_size));
  c.tie_embeddings = r.find_tensor("output.weight") == nullptr;
  c.qkv_bias = r.find_tensor("blk.0.attn_q.bias") != nullptr;
  if (arch == "qwen2" && !c.qkv_bias)
    return Status::error(fmt::format("{}: no blk.0.attn_q.bias; llama.cpp's qwen2 needs the q/k/v biases", path));
  c.qk_norm = arch == "qwen3";
  if (c.qk_norm && c.qkv_bias)
    return Status::error(fmt::format("{}: tensor blk.0.attn_q.bias in a qwen3 file; llama.cpp's qwen3 has QK-norm "
                                     "and no q/k/v biases", path));
  return Status::ok();
}

// RoPE scaling: linear by key, llama3 by the rope_freqs.weight tensor (a llama file's).
Status read_rope_scaling(const GgufReader& r, const std::string& path, const std::string& arch, ModelConfig& c,
                         GgufImportInfo& info) {
  const auto key = [&](const char* k) { return arch + "." + k; };
  std::string scaling = "none";
  if (Status s = r.get_string(key("rope.scaling.type"), scaling, false); !s) return s;
  info.rope = "plain";
  if (scaling == "linear") {
    float factor = 1;
    if (Status s = r.get_f32(key("rope.scaling.factor"), factor); !s) return s;
    c.rope_scaling = RopeScaling::kLinear;
    c.rope_factor = shortest(factor);
    info.rope = fmt::format("linear factor {}", c.rope_factor);
  } else if (!scaling.empty() && scaling != "none") {
    return Status::error(fmt::format("{}: {} is '{}'; Smelt has RoPE scaling none, linear and (from "
                                     "rope_freqs.weight) llama3", path, key("rope.scaling.type"), scaling));
  } else if (r.find(key("rope.scaling.factor"))) {
    return Status::error(fmt::format("{}: {} without {} linear", path, key("rope.scaling.factor"),
                                     key("rope.scaling.type")));
  }
  if (const GgufTensorInfo* rf = r.find_tensor("rope_freqs.weight")) {
    const int HS = c.head_size();
    if (arch != "llama" || rf->type != (uint32_t)GgmlType::kF32 || rf->ne != std::vector<int64_t>{(int64_t)HS / 2} ||
        c.rope_scaling != RopeScaling::kNone)
      return Status::error(fmt::format("{}: tensor rope_freqs.weight ({} [{}]{}): Smelt reads RoPE frequency factors "
                                       "as llama3 scaling of a llama file, F32 [{}], without rope.scaling.type", path,
                                       ggml_type_name(rf->type), fmt::join(rf->ne, ", "),
                                       c.rope_scaling != RopeScaling::kNone ? ", beside linear scaling" : "", HS / 2));
    const auto* ff = reinterpret_cast<const float*>(r.tensor_data(*rf));
    if (Status s = rope_from_factors(path, ff, c, info.rope_freqs_max_rel, info.rope); !s) return s;
  }
  return Status::ok();
}

// The {arch}.* metadata (and rope_freqs.weight) -> c.
Status read_config(const GgufReader& r, const std::string& path, int max_seq_len, ModelConfig& c,
                   GgufImportInfo& info) {
  if (Status s = read_architecture(r, path, info); !s) return s;
  const std::string& arch = info.architecture;
  if (Status s = read_sizes(r, path, arch, max_seq_len, c, info); !s) return s;
  if (Status s = read_tensor_config(r, path, arch, c); !s) return s;
  if (Status s = read_rope_scaling(r, path, arch, c, info); !s) return s;
  if (Status s = model_config_validate(c); !s) return Status::error(fmt::format("{}: {}", path, s.message()));
  return Status::ok();
}

// Every tensor of the file: exactly the layout's (and rope_freqs.weight), each with the shape the
// metadata gives, in a type Smelt dequantizes. Counts the types into info.
Status check_tensors(const GgufReader& r, const std::string& path, const ModelConfig& c, GgufImportInfo& info) {
  const ParamLayout layout = param_layout(c);
  const std::string& arch = info.architecture;
  std::set<std::string> wanted = {"rope_freqs.weight"};
  for (const auto& t : layout.tensors) wanted.insert(gguf_tensor_name(t.name));
  for (const auto& g : r.tensors())
    if (!wanted.count(g.name))
      return Status::error(fmt::format("{}: tensor {} is not part of Smelt's {} ({} layers{}{}{}); Smelt does not "
                                       "compute it", path, g.name, arch, c.n_layers,
                                       c.tie_embeddings ? ", tied head" : "", c.qkv_bias ? ", q/k/v biases" : "",
                                       c.qk_norm ? ", QK-norm" : ""));
  for (const auto& t : layout.tensors) {
    const std::string name = gguf_tensor_name(t.name);
    const GgufTensorInfo* g = r.find_tensor(name);
    if (!g) return Status::error(fmt::format("{}: no tensor {} (our {})", path, name, t.name));
    const std::vector<int64_t> ne = t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.cols, t.rows};
    if (g->type != (uint32_t)GgmlType::kF32 && g->type != (uint32_t)GgmlType::kF16 &&
        g->type != (uint32_t)GgmlType::kBf16 && g->type != (uint32_t)GgmlType::kQ8_0)
      return Status::error(fmt::format("{}: tensor {} is {}; Smelt imports F32, F16, BF16 and Q8_0 tensors "
                                       "(requantize the file with llama-quantize ... Q8_0, or import the Hugging Face "
                                       "checkpoint)", path, name, ggml_type_name(g->type)));
    if (g->ne != ne)
      return Status::error(fmt::format("{}: tensor {} has ne [{}], the {}.* metadata needs [{}]", path, name,
                                       fmt::join(g->ne, ", "), arch, fmt::join(ne, ", ")));
    info.types[ggml_type_name(g->type)]++;
  }
  return Status::ok();
}

}  // namespace

struct GgufWeights::Impl {
  GgufReader r;
  ModelConfig c;
  bool is_llama = false;
};

GgufWeights::GgufWeights() = default;
GgufWeights::~GgufWeights() = default;

Status GgufWeights::open(const std::string& path, int max_seq_len, ModelConfig& c, Tokenizer& tok,
                         GgufImportInfo* info_out) {
  impl_ = std::make_unique<Impl>();
  GgufReader& r = impl_->r;
  if (Status s = r.open(path); !s) return s;
  GgufImportInfo info;
  if (Status s = read_config(r, path, max_seq_len, c, info); !s) return s;
  if (Status s = check_tensors(r, path, c, info); !s) return s;
  if (Status s = tokenizer_from_file(r, c.vocab_size, tok, info); !s) return s;
  (void)r.get_string("general.name", info.name, false);
  info.file_bytes = (int64_t)r.file_size();
  impl_->c = c;
  impl_->is_llama = info.architecture == "llama";
  if (info_out) *info_out = std::move(info);
  return Status::ok();
}

Status GgufWeights::read(const ParamTensor& t, float* out) const {
  if (!impl_) return Status::error(fmt::format("tensor {}: no GGUF file is open", t.name));
  const GgufTensorInfo* g = impl_->r.find_tensor(gguf_tensor_name(t.name));
  if (!g) return Status::error(fmt::format("{}: no tensor {}", impl_->r.path(), gguf_tensor_name(t.name)));
  const ModelConfig& c = impl_->c;
  dequantize(*g, impl_->r.tensor_data(*g), out, t.size());
  // convert_hf_to_gguf.py's LlamaModel permutes q_proj and k_proj (weights and biases) for llama.
  if (impl_->is_llama && (ends_with(t.name, "q_proj.weight") || ends_with(t.name, "q_proj.bias")))
    gguf_permute_rope_rows(out, c.n_heads, c.head_size(), t.cols, true);
  if (impl_->is_llama && (ends_with(t.name, "k_proj.weight") || ends_with(t.name, "k_proj.bias")))
    gguf_permute_rope_rows(out, c.n_kv_heads, c.head_size(), t.cols, true);
  return Status::ok();
}

Status import_gguf_model(const std::string& path, int max_seq_len, ModelConfig& c, std::vector<float>& params,
                         Tokenizer& tok, GgufImportInfo* info) {
  GgufWeights w;
  if (Status s = w.open(path, max_seq_len, c, tok, info); !s) return s;
  const ParamLayout layout = param_layout(c);
  params.assign((size_t)layout.total, 0.0f);
  for (const auto& t : layout.tensors)
    if (Status s = w.read(t, params.data() + t.offset); !s) return s;
  return Status::ok();
}

Status import_gguf(const GgufImportOptions& o, GgufImportResult& out) {
  out = GgufImportResult{};
  ModelConfig& c = out.config;
  GgufWeights weights;
  Tokenizer tok;
  if (Status s = weights.open(o.gguf_path, o.max_seq_len, c, tok, &out.info); !s) return s;
  json st = {{"source", fs::absolute(o.gguf_path).lexically_normal().string()},
             {"format", "gguf"},
             {"architecture", out.info.architecture},
             {"name", out.info.name},
             {"context_length", out.info.context_length},
             {"max_seq_len", c.max_seq_len},
             {"tensor_types", out.info.types},
             {"rope", out.info.rope},
             {"tokenizer.ggml.pre", out.info.pre}};
  for (const auto& [k, v] : out.info.tokens.items()) st[k] = v;

  // The destination: refused before anything is written when it holds checkpoints.
  std::vector<std::string> old_steps;
  if (Status s = import_check_destination(o.run_dir, o.force, old_steps); !s) return s;
  // The rebuilt tokenizer goes into the checkpoint as tokenizer.json (ckpt_save copies a file).
  const fs::path tok_tmp = fs::temp_directory_path() / fmt::format("smelt-import-gguf-{}-tokenizer.json", ::getpid());
  if (Status s = tok.save_hf(tok_tmp.string()); !s) return s;
  struct Remove {
    fs::path p;
    ~Remove() {
      std::error_code e;
      fs::remove(p, e);
    }
  } remove_tmp{tok_tmp};

  const std::string config_toml = o.config_toml
                                      ? o.config_toml(c, tok.eod_id() ? (int64_t)*tok.eod_id() : -1)
                                      : config_to_string(toml::table{{"model", model_config_to_toml(c)}});
  ImportSaved saved;
  if (Status s = import_save_step0(o.run_dir, c, [&](const ParamTensor& t, float* v) { return weights.read(t, v); },
                                   config_toml, tok_tmp.string(), st, old_steps, saved);
      !s)
    return s;
  out.removed = std::move(saved.removed);
  out.step_dir = saved.step_dir;
  out.params = param_count(c);
  out.import_state = std::move(st);
  return Status::ok();
}

}  // namespace smelt
