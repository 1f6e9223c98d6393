// Smelt's Llama <-> GGUF (export_gguf.hpp). The mapping is one table of names (ours are Hugging
// Face's; llama.cpp's are token_embd, blk.N.attn_q, ...), one row permutation for Q and K (our
// RoPE pairs element i with i + HS/2, as HF's rotate_half; llama.cpp's llama architecture uses
// LLAMA_ROPE_TYPE_NORM, adjacent pairs 2j, 2j+1, so convert_hf_to_gguf.py permutes the rows and
// so do we), and the tokenizer's vocabulary in GPT-2's byte-level alphabet with token types.
// Not the byte format (gguf.cpp).
#include "smelt/ckpt/export_gguf.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/export_hf.hpp"
#include "smelt/common/files.hpp"
#include "smelt/kernels/decode_linear.hpp"
#include "smelt/model/params.hpp"
#include "smelt/tokenizer/byte_level.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;

namespace smelt {

const char* gguf_dtype_name(GgufDtype d) {
  return d == GgufDtype::kF16 ? "f16" : d == GgufDtype::kQ8_0 ? "q8_0" : "f32";
}

Status gguf_dtype_parse(const std::string& s, GgufDtype& out) {
  if (s == "f32" || s == "fp32") out = GgufDtype::kF32;
  else if (s == "f16" || s == "fp16") out = GgufDtype::kF16;
  else if (s == "q8_0") out = GgufDtype::kQ8_0;
  else return Status::error(fmt::format("--dtype {}: expected f32, f16 or q8_0", s));
  return Status::ok();
}

std::string gguf_pre_name(const std::string& pretokenizer, bool ignore_merges) {
  if (pretokenizer == "gpt2") return "gpt-2";
  if (pretokenizer == "llama3" || pretokenizer == "cl100k") return ignore_merges ? "llama-bpe" : "dbrx";
  if (pretokenizer == "qwen2") return "qwen2";
  if (pretokenizer == "o200k") return "gpt-4o";
  return "";
}

void gguf_permute_rope_rows(float* w, int heads, int HS, int64_t cols, bool inverse) {
  const int half = HS / 2;
  std::vector<float> head((size_t)HS * cols);
  for (int h = 0; h < heads; h++) {
    float* hw = w + (int64_t)h * HS * cols;
    std::copy(hw, hw + (int64_t)HS * cols, head.begin());
    for (int s = 0; s < 2; s++)
      for (int j = 0; j < half; j++) {
        const int64_t ours = s * half + j, theirs = 2 * j + s;
        const int64_t from = inverse ? theirs : ours, to = inverse ? ours : theirs;
        std::copy(head.begin() + from * cols, head.begin() + (from + 1) * cols, hw + to * cols);
      }
  }
}

namespace {

// llama.cpp token types (llama.h LLAMA_TOKEN_TYPE_*).
constexpr int32_t kTokNormal = 1, kTokControl = 3, kTokUserDefined = 4, kTokUnused = 5;

// Our (Hugging Face) parameter name -> llama.cpp's tensor name.
std::string gguf_tensor_name(const std::string& ours) {
  if (ours == "model.embed_tokens.weight") return "token_embd.weight";
  if (ours == "model.norm.weight") return "output_norm.weight";
  if (ours == "lm_head.weight") return "output.weight";
  static const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm.weight", "attn_norm.weight"}, {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},   {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},    {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  const std::string pre = "model.layers.";
  size_t dot = ours.find('.', pre.size());
  if (ours.rfind(pre, 0) == 0 && dot != std::string::npos) {
    std::string rest = ours.substr(dot + 1);
    for (const auto& [a, b] : kLayer)
      if (rest == a) return "blk." + ours.substr(pre.size(), dot - pre.size()) + "." + b;
  }
  return "";
}

// 0 = not a RoPE'd projection; else the head count whose rows are permuted.
int rope_heads(const std::string& ours, const ModelConfig& c) {
  auto ends = [&](const char* s) { return ours.size() > std::strlen(s) && ours.compare(ours.size() - std::strlen(s), std::string::npos, s) == 0; };
  if (ends("self_attn.q_proj.weight")) return c.n_heads;
  if (ends("self_attn.k_proj.weight")) return c.n_kv_heads;
  return 0;
}

std::vector<int64_t> gguf_ne(const ParamTensor& t) {
  return t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.cols, t.rows};
}

// The shortest decimal that reads back as f, as a double: 1e-5 stored as float32 loads as 1e-5
// again, so a round-tripped config equals the original.
double float_to_double(float f) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  double d = f;
  std::from_chars(buf, r.ptr, d);
  return d;
}

// The vocabulary as llama.cpp's gpt2 tokenizer reads it: tokens in the byte-level alphabet,
// special tokens as their text (CONTROL, or USER_DEFINED for added non-special ones), ids beyond
// the tokenizer (a padded model vocabulary) as unique "[PAD<id>]" UNUSED placeholders; merges as
// "left right" in priority order.
struct GgufVocab {
  std::vector<std::string> tokens, merges;
  std::vector<int32_t> types;
};

Status vocab_from_tokenizer(const Tokenizer& tok, int V, const std::string& where, GgufVocab& out) {
  const BpeModel& m = tok.model();
  out.tokens.assign(V, "");
  out.types.assign(V, kTokUnused);
  std::vector<std::string> bl(m.vocab.size());
  for (size_t id = 0; id < m.vocab.size() && id < (size_t)V; id++)
    if (!m.vocab[id].empty()) {
      bl[id] = byte_level_encode(m.vocab[id]);
      out.tokens[id] = bl[id];
      out.types[id] = kTokNormal;
    }
  for (const auto& s : m.specials) {
    if (s.id >= (uint32_t)V) continue;  // vocab_size was checked against V by the caller
    out.tokens[s.id] = s.text;
    out.types[s.id] = s.special ? kTokControl : kTokUserDefined;
  }
  std::unordered_map<std::string, int> seen;
  seen.reserve(V * 2);
  for (int id = 0; id < V; id++) {
    if (out.types[id] == kTokUnused) {
      std::string p = fmt::format("[PAD{}]", id);
      while (seen.count(p)) p += "_";
      out.tokens[id] = p;
    }
    auto [it, fresh] = seen.emplace(out.tokens[id], id);
    if (!fresh)
      return Status::error(fmt::format("{}: token {} ('{}') is the same text as token {}; llama.cpp refuses a "
                                       "vocabulary with duplicate tokens", where, id, out.tokens[id], it->second));
  }
  out.merges.reserve(m.merges.size());
  for (auto [a, b] : m.merges) out.merges.push_back(bl[a] + " " + bl[b]);
  return Status::ok();
}

// [model] of the checkpoint's manifest.
Status read_ckpt_config(const std::string& step_dir, const CkptManifest& m, ModelConfig& c) {
  try {
    toml::table root = toml::parse(m.config_toml);
    if (Status s = model_config_read(root, c); !s)
      return Status::error(fmt::format("{}/manifest.json config_toml: {}", step_dir, s.message()));
  } catch (const toml::parse_error& e) {
    return Status::error(fmt::format("{}/manifest.json: config_toml line {}: {}", step_dir, e.source().begin.line,
                                     e.description()));
  }
  return Status::ok();
}

// general.name: the run folder's name (RUN/checkpoints/step_N -> RUN), else the step folder's.
std::string model_name(const std::string& step_dir) {
  fs::path p = fs::absolute(fs::path(step_dir)).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  if (p.parent_path().filename() == "checkpoints") return p.parent_path().parent_path().filename().string();
  return p.filename().string();
}

}  // namespace

Status export_gguf(const std::string& step_dir, const std::string& out_path, GgufDtype dtype,
                   const std::string& tokenizer_path, GgufExportStats* stats) {
  CkptManifest m;
  if (Status s = ckpt_read_manifest(step_dir, m); !s) return s;
  ModelConfig c;
  if (Status s = read_ckpt_config(step_dir, m, c); !s) return s;
  // What the llama architecture's GGUF keys describe; the families' extras are written by none yet.
  const char* extra = c.qkv_bias ? "qkv_bias (Qwen2's q/k/v biases)"
                      : c.qk_norm ? "qk_norm (Qwen3's QK-norm)"
                      : c.rope_scaling != RopeScaling::kNone ? "rope_scaling"
                      : c.head_dim > 0 && c.head_dim * c.n_heads != c.d_model ? "head_dim != d_model / n_heads"
                                                                               : nullptr;
  if (extra)
    return Status::error(fmt::format("{}: [model] {}: the GGUF export writes the plain llama architecture only; "
                                     "export this model with --format hf", step_dir, extra));

  const std::string tok_src =
      tokenizer_path.empty() ? (fs::path(step_dir) / "tokenizer.json").string() : tokenizer_path;
  std::error_code ec;
  if (!fs::exists(tok_src, ec))
    return Status::error(tokenizer_path.empty()
                             ? fmt::format("{}: no tokenizer.json in the checkpoint; a GGUF file carries its "
                                           "tokenizer, so pass --tokenizer FILE", step_dir)
                             : fmt::format("--tokenizer {}: no such file", tokenizer_path));
  Tokenizer tok;
  if (Status s = Tokenizer::load(tok_src, tok); !s) return Status::error(fmt::format("{}: {}", tok_src, s.message()));
  if ((int64_t)tok.vocab_size() > c.vocab_size)
    return Status::error(fmt::format("{}: tokenizer vocabulary {} exceeds the model's vocab_size {}", tok_src,
                                     tok.vocab_size(), c.vocab_size));
  const std::string pre = gguf_pre_name(tok.pretokenizer().name(), tok.model().ignore_merges);
  if (pre.empty())
    return Status::error(fmt::format("{}: the pre-tokenizer regex {} has no llama.cpp name (tokenizer.ggml.pre), "
                                     "so llama.cpp would split text differently; train the tokenizer with "
                                     "--pretokenizer gpt2, llama3, qwen2 or o200k", tok_src,
                                     tok.pretokenizer().pattern()));
  // llama.cpp fixes ignore_merges by name: only llama-bpe sets it.
  if (tok.model().ignore_merges != (pre == "llama-bpe"))
    spdlog::warn("{}: ignore_merges is {} but llama.cpp's '{}' pre-tokenizer has it {}; a pre-token that is in the "
                 "vocabulary but not reached by merges would tokenize differently there", tok_src,
                 tok.model().ignore_merges, pre, pre == "llama-bpe");
  GgufVocab vocab;
  if (Status s = vocab_from_tokenizer(tok, c.vocab_size, tok_src, vocab); !s) return s;
  const std::optional<uint32_t> eod = tok.eod_id();
  if (!eod)
    spdlog::warn("{}: no end-of-document token; llama.cpp then takes id 11 as BOS/EOS (its gpt2 default)", tok_src);

  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", model_name(step_dir));
  w.add_u32("general.file_type", dtype == GgufDtype::kF32 ? 0 : dtype == GgufDtype::kF16 ? 1 : 7);  // LLAMA_FTYPE_*
  w.add_u32("general.quantization_version", 2);  // GGML_QNT_VERSION
  w.add_u32("general.alignment", kGgufDefaultAlignment);
  w.add_u32("llama.vocab_size", c.vocab_size);
  w.add_u32("llama.context_length", c.max_seq_len);
  w.add_u32("llama.embedding_length", c.d_model);
  w.add_u32("llama.block_count", c.n_layers);
  w.add_u32("llama.feed_forward_length", c.ffn_hidden);
  w.add_u32("llama.attention.head_count", c.n_heads);
  w.add_u32("llama.attention.head_count_kv", c.n_kv_heads);
  w.add_u32("llama.rope.dimension_count", c.head_size());
  w.add_f32("llama.rope.freq_base", (float)c.rope_theta);
  w.add_f32("llama.attention.layer_norm_rms_epsilon", (float)c.norm_eps);
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", pre);
  w.add_strings("tokenizer.ggml.tokens", vocab.tokens);
  w.add_i32s("tokenizer.ggml.token_type", vocab.types);
  w.add_strings("tokenizer.ggml.merges", vocab.merges);
  if (eod) {
    w.add_u32("tokenizer.ggml.bos_token_id", *eod);
    w.add_u32("tokenizer.ggml.eos_token_id", *eod);
  }
  // smelt generate encodes the prompt as it is (no BOS, no EOS); llama.cpp must do the same.
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  w.add_bool("tokenizer.ggml.add_eos_token", false);

  // Each tensor's type, decided before the header is written.
  ParamLayout layout = param_layout(c);
  std::vector<GgmlType> types;
  int64_t largest = 0;
  GgufExportStats st;
  for (const auto& t : layout.tensors) {  // presence and shapes: checked by ckpt_read_box below
    GgmlType g = GgmlType::kF32;
    if (t.cols > 1 && dtype == GgufDtype::kF16) g = GgmlType::kF16;
    if (t.cols > 1 && dtype == GgufDtype::kQ8_0) {
      g = t.cols % kQ8Block == 0 ? GgmlType::kQ8_0 : GgmlType::kF16;
      if (g == GgmlType::kF16) st.f16_fallbacks++;
    }
    types.push_back(g);
    w.add_tensor(gguf_tensor_name(t.name), gguf_ne(t), g);
    st.types[ggml_type_name((uint32_t)g)]++;
    largest = std::max(largest, t.size());
  }
  if (st.f16_fallbacks)
    spdlog::info("{} matrices have rows of {} values, not whole Q8_0 blocks of 32: stored as F16", st.f16_fallbacks,
                 c.ffn_hidden);

  fs::path out(out_path);
  if (out.has_parent_path()) fs::create_directories(out.parent_path(), ec);
  const std::string tmp = out_path + ".tmp";
  std::vector<float> buf((size_t)largest);
  std::vector<uint8_t> conv((size_t)largest * 2);  // F16 or Q8_0 bytes (<= 2 per value)
  Status s = w.open(tmp);
  for (size_t i = 0; s && i < layout.tensors.size(); i++) {
    const ParamTensor& t = layout.tensors[i];
    s = ckpt_read_box(step_dir, m, t.name, t.rows, t.cols, CkptBox{0, 0, t.rows, t.cols}, buf.data());
    if (!s) break;
    if (int heads = rope_heads(t.name, c)) gguf_permute_rope_rows(buf.data(), heads, c.head_size(), t.cols, false);
    switch (types[i]) {
      case GgmlType::kF32: s = w.write_tensor(buf.data(), 4 * t.size()); break;
      case GgmlType::kF16: {
        uint16_t* h = reinterpret_cast<uint16_t*>(conv.data());
        for (int64_t k = 0; k < t.size(); k++) h[k] = fp16_from_f32(buf[k]);
        s = w.write_tensor(h, 2 * t.size());
        break;
      }
      case GgmlType::kQ8_0:
        // Rows are whole blocks, so the tensor quantizes as one long row.
        quantize_row_q8_0(reinterpret_cast<BlockQ8_0*>(conv.data()), buf.data(), t.size());
        s = w.write_tensor(conv.data(), t.size() / kQ8Block * (int64_t)sizeof(BlockQ8_0));
        break;
    }
  }
  if (s) s = w.finish();
  if (!s) {
    fs::remove(tmp, ec);
    return s;
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    fs::remove(tmp, ec);
    return Status::error(fmt::format("{}: cannot rename into place: {}", out_path, std::strerror(errno)));
  }
  if (Status d = files_fsync_dir(out.has_parent_path() ? out.parent_path().string() : "."); !d) return d;
  if (stats) {
    st.tensors = (int)layout.tensors.size();
    st.bytes = w.file_bytes();
    st.largest_tensor = 4 * largest;
    st.pre = pre;
    *stats = st;
  }
  return Status::ok();
}

namespace {

Status tokenizer_from_gguf(const GgufReader& r, int V, Tokenizer& tok, std::string& pre_out) {
  const std::string& path = r.path();
  std::string model;
  if (Status s = r.get_string("tokenizer.ggml.model", model); !s) return s;
  if (model != "gpt2")
    return Status::error(fmt::format("{}: tokenizer.ggml.model is '{}'; Smelt loads byte-level BPE ('gpt2') only{}",
                                     path, model, model == "llama" ? " (this is a SentencePiece vocabulary)" : ""));
  std::string pre;
  if (!r.find("tokenizer.ggml.pre"))
    return Status::error(fmt::format("{}: no tokenizer.ggml.pre; llama.cpp would fall back to its 'default' "
                                     "pre-tokenizer (and warn GENERATION QUALITY WILL BE DEGRADED), which Smelt "
                                     "does not implement", path));
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
    return Status::error(fmt::format("{}: tokenizer.ggml.pre '{}' is not one Smelt has (gpt-2, llama-bpe, dbrx, "
                                     "smaug-bpe, qwen2, gpt-4o)", path, pre));
  pre_out = pre;
  const std::vector<std::string>* tokens = nullptr;
  const std::vector<std::string>* merges = nullptr;
  if (Status s = r.get_strings("tokenizer.ggml.tokens", tokens); !s) return s;
  if (Status s = r.get_strings("tokenizer.ggml.merges", merges); !s) return s;
  if ((int)tokens->size() != V)
    return Status::error(fmt::format("{}: tokenizer.ggml.tokens has {} entries, token_embd.weight {} rows", path,
                                     tokens->size(), V));
  const std::vector<int64_t>* types = nullptr;
  if (r.find("tokenizer.ggml.token_type")) {
    if (Status s = r.get_ints("tokenizer.ggml.token_type", types); !s) return s;
    if (types->size() != tokens->size())
      return Status::error(fmt::format("{}: tokenizer.ggml.token_type has {} entries, tokens {}", path, types->size(),
                                       tokens->size()));
  }
  m.vocab.resize(tokens->size());
  std::unordered_map<std::string, uint32_t> id_of;
  id_of.reserve(tokens->size() * 2);
  size_t last = 0;  // one past the last id that is not an UNUSED placeholder
  for (size_t id = 0; id < tokens->size(); id++) {
    const std::string& t = (*tokens)[id];
    int64_t type = types ? (*types)[id] : kTokNormal;
    if (type == kTokNormal) {
      std::string raw;
      if (!byte_level_decode(t, raw)) raw = t;  // not in the alphabet: its UTF-8 text, as load_hf does
      m.vocab[id] = raw;
      id_of.emplace(t, (uint32_t)id);
    } else if (type == kTokControl || type == kTokUserDefined) {
      m.vocab[id] = t;
      m.specials.push_back({t, (uint32_t)id, type == kTokControl});
    } else if (type != kTokUnused) {
      return Status::error(fmt::format("{}: tokenizer.ggml.token_type[{}] = {} (token '{}'); Smelt's byte-level BPE "
                                       "has normal (1), control (3), user-defined (4) and unused (5) tokens", path,
                                       id, type, t));
    }
    if (type != kTokUnused) last = id + 1;
  }
  m.vocab.resize(last);
  m.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); i++) {
    const std::string& s = (*merges)[i];
    size_t sp = s.find(' ', 1);
    auto a = sp == std::string::npos ? id_of.end() : id_of.find(s.substr(0, sp));
    auto b = sp == std::string::npos ? id_of.end() : id_of.find(s.substr(sp + 1));
    if (a == id_of.end() || b == id_of.end())
      return Status::error(fmt::format("{}: tokenizer.ggml.merges[{}] = '{}': expected two normal tokens separated "
                                       "by a space", path, i, s));
    m.merges.emplace_back(a->second, b->second);
  }
  m.info = {{"source", path}, {"format", "gguf"}, {"tokenizer.ggml.pre", pre}};
  if (Status s = Tokenizer::from_model(std::move(m), tok); !s)
    return Status::error(fmt::format("{}: tokenizer: {}", path, s.message()));
  return Status::ok();
}

}  // namespace

Status gguf_load_model(const std::string& path, ModelConfig& c, std::vector<float>& params, Tokenizer& tok,
                       GgufModelInfo* info) {
  GgufReader r;
  if (Status s = r.open(path); !s) return s;
  std::string arch;
  if (Status s = r.get_string("general.architecture", arch); !s) return s;
  if (arch != "llama")
    return Status::error(fmt::format("{}: general.architecture is '{}'; Smelt loads 'llama' only (RMSNorm, RoPE, "
                                     "SwiGLU, no biases)", path, arch));
  uint32_t ctx = 0, C = 0, L = 0, H = 0, NH = 0, NKV = 0, rope_dim = 0;
  float theta = 10000.0f, eps = 0;
  for (auto [key, out] : {std::pair{"llama.context_length", &ctx}, {"llama.embedding_length", &C},
                          {"llama.block_count", &L}, {"llama.feed_forward_length", &H},
                          {"llama.attention.head_count", &NH}})
    if (Status s = r.get_u32(key, *out); !s) return s;
  NKV = NH;
  if (Status s = r.get_u32("llama.attention.head_count_kv", NKV, false); !s) return s;
  if (Status s = r.get_f32("llama.rope.freq_base", theta, false); !s) return s;
  if (Status s = r.get_f32("llama.attention.layer_norm_rms_epsilon", eps); !s) return s;
  if (NH == 0 || C % NH != 0)
    return Status::error(fmt::format("{}: llama.embedding_length {} is not a multiple of llama.attention.head_count {}",
                                     path, C, NH));
  const uint32_t HS = C / NH;
  rope_dim = HS;
  if (Status s = r.get_u32("llama.rope.dimension_count", rope_dim, false); !s) return s;
  if (rope_dim != HS)
    return Status::error(fmt::format("{}: llama.rope.dimension_count {} != head size {}; Smelt rotates whole heads",
                                     path, rope_dim, HS));
  for (const char* k : {"llama.attention.key_length", "llama.attention.value_length"}) {
    uint32_t v = HS;
    if (Status s = r.get_u32(k, v, false); !s) return s;
    if (v != HS) return Status::error(fmt::format("{}: {} {} != embedding_length / head_count = {}", path, k, v, HS));
  }
  std::string scaling = "none";
  if (Status s = r.get_string("llama.rope.scaling.type", scaling, false); !s) return s;
  if (!scaling.empty() && scaling != "none")
    return Status::error(fmt::format("{}: llama.rope.scaling.type is '{}'; Smelt has plain RoPE only", path, scaling));
  uint32_t experts = 0;
  if (Status s = r.get_u32("llama.expert_count", experts, false); !s) return s;
  if (experts > 0)
    return Status::error(fmt::format("{}: llama.expert_count {}: mixture-of-experts models are not supported", path,
                                     experts));
  const GgufTensorInfo* emb = r.find_tensor("token_embd.weight");
  if (!emb || emb->ne.size() != 2)
    return Status::error(fmt::format("{}: no 2-D tensor token_embd.weight", path));
  c = ModelConfig{};
  c.vocab_size = (int)emb->ne[1];
  c.d_model = (int)C;
  c.n_layers = (int)L;
  c.n_heads = (int)NH;
  c.n_kv_heads = (int)NKV;
  c.ffn_hidden = (int)H;
  c.max_seq_len = (int)ctx;
  c.rope_theta = float_to_double(theta);
  c.norm_eps = float_to_double(eps);
  c.tie_embeddings = r.find_tensor("output.weight") == nullptr;
  uint32_t nv = (uint32_t)c.vocab_size;
  if (Status s = r.get_u32("llama.vocab_size", nv, false); !s) return s;
  if ((int)nv != c.vocab_size)
    return Status::error(fmt::format("{}: llama.vocab_size {} but token_embd.weight has {} rows", path, nv,
                                     c.vocab_size));
  if (Status s = model_config_validate(c); !s) return Status::error(fmt::format("{}: {}", path, s.message()));

  ParamLayout layout = param_layout(c);
  std::unordered_set<std::string> wanted;
  for (const auto& t : layout.tensors) wanted.insert(gguf_tensor_name(t.name));
  for (const auto& g : r.tensors())
    if (!wanted.count(g.name))
      return Status::error(fmt::format("{}: tensor {} is not part of Smelt's Llama ({} layers{}); RoPE frequency "
                                       "factors, biases and other extras are not supported", path, g.name, L,
                                       c.tie_embeddings ? ", tied head" : ""));
  params.assign((size_t)layout.total, 0.0f);
  GgufModelInfo inf;
  bool any_q8 = false, any_f16 = false;
  for (const auto& t : layout.tensors) {
    const std::string name = gguf_tensor_name(t.name);
    const GgufTensorInfo* g = r.find_tensor(name);
    if (!g) return Status::error(fmt::format("{}: no tensor {} (our {})", path, name, t.name));
    const std::vector<int64_t> ne = gguf_ne(t);
    if (g->ne != ne)
      return Status::error(fmt::format("{}: tensor {} has ne [{}], the llama.* metadata needs [{}]", path, name,
                                       fmt::join(g->ne, ", "), fmt::join(ne, ", ")));
    if (g->type != (uint32_t)GgmlType::kF32 && g->type != (uint32_t)GgmlType::kF16 &&
        g->type != (uint32_t)GgmlType::kQ8_0)
      return Status::error(fmt::format("{}: tensor {} is {}; Smelt loads F32, F16 and Q8_0", path, name,
                                       ggml_type_name(g->type)));
    inf.types[ggml_type_name(g->type)]++;
    if (t.cols > 1) {
      any_q8 |= g->type == (uint32_t)GgmlType::kQ8_0;
      any_f16 |= g->type == (uint32_t)GgmlType::kF16;
    }
    float* out = params.data() + t.offset;
    const uint8_t* data = r.tensor_data(*g);
    if (g->type == (uint32_t)GgmlType::kF32) {
      std::memcpy(out, data, 4 * t.size());
    } else if (g->type == (uint32_t)GgmlType::kF16) {
      for (int64_t k = 0; k < t.size(); k++) {
        uint16_t h;
        std::memcpy(&h, data + 2 * k, 2);
        out[k] = f32_from_fp16(h);
      }
    } else {
      dequantize_row_q8_0(out, reinterpret_cast<const BlockQ8_0*>(data), t.size());
    }
    if (int heads = rope_heads(t.name, c)) gguf_permute_rope_rows(out, heads, c.head_size(), t.cols, true);
  }
  std::string pre;
  if (Status s = tokenizer_from_gguf(r, c.vocab_size, tok, pre); !s) return s;
  if (info) {
    inf.path = path;
    (void)r.get_string("general.name", inf.name, false);
    inf.pre = pre;
    inf.file_type = any_q8 ? "q8_0" : any_f16 ? "f16" : "f32";  // q8_0 may hold F16 fallbacks
    inf.file_bytes = (int64_t)r.file_size();
    *info = inf;
  }
  return Status::ok();
}

double gguf_check_tolerance(const std::string& file_type) {
  return file_type == "f32" ? 0.0 : file_type == "f16" ? 2e-2 : 5e-2;
}

Status export_gguf_check(const std::string& step_dir, const std::string& gguf_path, double* max_abs_diff,
                         double* rel_diff, std::string* file_type) {
  ModelConfig ca, cb;
  std::vector<float> pa, pb;
  if (Status s = ckpt_load_model(step_dir, ca, pa); !s) return s;
  Tokenizer tok;
  GgufModelInfo info;
  if (Status s = gguf_load_model(gguf_path, cb, pb, tok, &info); !s) return s;
  if (file_type) *file_type = info.file_type;
  if (ca.vocab_size != cb.vocab_size || ca.d_model != cb.d_model || ca.n_layers != cb.n_layers ||
      ca.n_heads != cb.n_heads || ca.n_kv_heads != cb.n_kv_heads || ca.ffn_hidden != cb.ffn_hidden ||
      ca.max_seq_len != cb.max_seq_len || ca.rope_theta != cb.rope_theta || ca.norm_eps != cb.norm_eps ||
      ca.tie_embeddings != cb.tie_embeddings)
    return Status::error(fmt::format("{}: its llama.* metadata describes a different model than {}", gguf_path,
                                     step_dir));
  Tokenizer want;
  const std::string tok_path = (fs::path(step_dir) / "tokenizer.json").string();
  std::error_code ec;
  if (fs::exists(tok_path, ec)) {
    if (Status s = Tokenizer::load(tok_path, want); !s) return s;
    if (want.content_hash() != tok.content_hash())
      return Status::error(fmt::format("{}: the tokenizer read back differs from {}", gguf_path, tok_path));
  }
  LogitsDiff d;
  if (Status s = export_logits_diff(ca, pa, pb, d); !s) return s;
  const double diff = d.max_abs, scale = d.scale;
  const bool nan = d.nan;
  if (max_abs_diff) *max_abs_diff = diff;
  if (rel_diff) *rel_diff = diff / scale;
  const double tol = gguf_check_tolerance(info.file_type);
  if (nan || diff > tol * scale)
    return Status::error(fmt::format("{}: logits of a fixed batch differ from the checkpoint's by up to {} ({} of "
                                     "max(1, max|logit|)); {} allows {}{}", gguf_path, diff, diff / scale,
                                     info.file_type, info.file_type == "f32" ? "none (the same fp32 values)"
                                                                             : fmt::format("{}", tol),
                                     nan ? "; NaN logits" : ""));
  return Status::ok();
}

}  // namespace smelt
