// Smelt's decoder <-> GGUF (export_gguf.hpp). The mapping is one table of names (ours are Hugging
// Face's; llama.cpp's are token_embd, blk.N.attn_q, ...), one row permutation for Q and K (our
// RoPE pairs element i with i + HS/2, as HF's rotate_half; llama.cpp's llama architecture uses
// LLAMA_ROPE_TYPE_NORM, adjacent pairs 2j, 2j+1, so convert_hf_to_gguf.py permutes the rows and
// so do we; its qwen2 uses NEOX, our order), and the tokenizer's vocabulary in GPT-2's byte-level
// alphabet with token types.
// Not the byte format (gguf.cpp).
#include "smelt/ckpt/export_gguf.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/export_hf.hpp"
#include "smelt/ckpt/import_gguf.hpp"
#include "smelt/common/files.hpp"
#include "smelt/kernels/decode_linear.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/model/params.hpp"
#include "smelt/tokenizer/byte_level.hpp"
#include "smelt/tokenizer/chat_state.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;

namespace smelt {

const char* gguf_dtype_name(GgufDtype d) {
  switch (d) {
    case GgufDtype::kF32: return "f32";
    case GgufDtype::kBf16: return "bf16";
    case GgufDtype::kF16: return "f16";
    case GgufDtype::kQ8_0: return "q8_0";
  }
  return "?";
}

Status gguf_dtype_parse(const std::string& s, GgufDtype& out) {
  if (s == "f32" || s == "fp32") out = GgufDtype::kF32;
  else if (s == "bf16") out = GgufDtype::kBf16;
  else if (s == "f16" || s == "fp16") out = GgufDtype::kF16;
  else if (s == "q8_0") out = GgufDtype::kQ8_0;
  else return Status::error(fmt::format("--dtype {}: expected f32, bf16, f16 or q8_0", s));
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

std::string gguf_tensor_name(const std::string& ours) {
  if (ours == "model.embed_tokens.weight") return "token_embd.weight";
  if (ours == "model.norm.weight") return "output_norm.weight";
  if (ours == "lm_head.weight") return "output.weight";
  static const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm.weight", "attn_norm.weight"},   {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},     {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},         {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},         {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"}, {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"}, {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},          {"mlp.down_proj.weight", "ffn_down.weight"}};
  const std::string pre = "model.layers.";
  const size_t dot = ours.find('.', pre.size());
  if (ours.rfind(pre, 0) == 0 && dot != std::string::npos) {
    const std::string rest = ours.substr(dot + 1);
    for (const auto& [a, b] : kLayer)
      if (rest == a) return "blk." + ours.substr(pre.size(), dot - pre.size()) + "." + b;
  }
  return "";
}

namespace {

// llama.cpp token types (llama.h LLAMA_TOKEN_TYPE_*).
constexpr int32_t kTokNormal = 1, kTokControl = 3, kTokUserDefined = 4, kTokUnused = 5;

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

// The llama.cpp architecture of a model: `qwen3` with QK-norm, `qwen2` with q/k/v biases (both
// NEOX RoPE, as ours), else `llama`. Refused, naming the keys: QK-norm beside biases (no llama.cpp
// architecture has both) and Llama 3's RoPE scaling on qwen2/qwen3 (llama.cpp reads
// rope_freqs.weight for llama only).
Status gguf_export_architecture(const std::string& step_dir, const ModelConfig& c, std::string& arch) {
  if (c.qk_norm && c.qkv_bias)
    return Status::error(fmt::format("{}: [model] qk_norm with qkv_bias: no llama.cpp architecture has both (qwen3 "
                                     "has the norms, qwen2 the biases)", step_dir));
  arch = c.qk_norm ? "qwen3" : c.qkv_bias ? "qwen2" : "llama";
  if (arch != "llama" && c.rope_scaling == RopeScaling::kLlama3)
    return Status::error(fmt::format("{}: [model] rope_scaling = \"llama3\" with {}: llama.cpp reads Llama 3's "
                                     "scaling (rope_freqs.weight) for the llama architecture only; export this model "
                                     "with --format hf", step_dir, c.qk_norm ? "qk_norm" : "qkv_bias"));
  return Status::ok();
}

// {arch}.* keys: the sizes, RoPE (head size, base, linear scaling) and the norm's epsilon; the head
// size as attention.key_length / value_length when it is not embedding_length / head_count.
void add_arch_keys(GgufWriter& w, const std::string& arch, const ModelConfig& c) {
  const auto key = [&](const char* k) { return arch + "." + k; };
  w.add_u32(key("vocab_size"), c.vocab_size);
  w.add_u32(key("context_length"), c.max_seq_len);
  w.add_u32(key("embedding_length"), c.d_model);
  w.add_u32(key("block_count"), c.n_layers);
  w.add_u32(key("feed_forward_length"), c.ffn_hidden);
  w.add_u32(key("attention.head_count"), c.n_heads);
  w.add_u32(key("attention.head_count_kv"), c.n_kv_heads);
  if (c.head_size() * c.n_heads != c.d_model) {
    w.add_u32(key("attention.key_length"), c.head_size());
    w.add_u32(key("attention.value_length"), c.head_size());
  }
  w.add_u32(key("rope.dimension_count"), c.head_size());
  w.add_f32(key("rope.freq_base"), (float)c.rope_theta);
  w.add_f32(key("attention.layer_norm_rms_epsilon"), (float)c.norm_eps);
  if (c.rope_scaling == RopeScaling::kLinear) {
    w.add_string(key("rope.scaling.type"), "linear");
    w.add_f32(key("rope.scaling.factor"), (float)c.rope_factor);
  }
}

// general.file_type: llama.h's LLAMA_FTYPE_ALL_F32 / MOSTLY_F16 / MOSTLY_Q8_0 / MOSTLY_BF16.
uint32_t gguf_file_type(GgufDtype d) {
  switch (d) {
    case GgufDtype::kF32: return 0;
    case GgufDtype::kF16: return 1;
    case GgufDtype::kQ8_0: return 7;
    case GgufDtype::kBf16: return 32;
  }
  return 0;
}

// general.name: the run folder's name (RUN/checkpoints/step_N -> RUN), else the step folder's.
std::string model_name(const std::string& step_dir) {
  fs::path p = fs::absolute(fs::path(step_dir)).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  if (p.parent_path().filename() == "checkpoints") return p.parent_path().parent_path().filename().string();
  return p.filename().string();
}

}  // namespace

Status export_gguf(const ExportSource& src, const std::string& out_path, GgufDtype dtype,
                   const std::string& tokenizer_path, GgufExportStats* stats) {
  ExportWeights weights;
  if (Status s = weights.open(src); !s) return s;
  const std::string& step_dir = src.step_dir;
  const CkptManifest& m = weights.manifest();
  const ModelConfig& c = weights.config();
  std::string arch;
  if (Status s = gguf_export_architecture(step_dir, c, arch); !s) return s;

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
  w.add_string("general.architecture", arch);
  w.add_string("general.name", model_name(step_dir));
  w.add_u32("general.file_type", gguf_file_type(dtype));
  w.add_u32("general.quantization_version", 2);  // GGML_QNT_VERSION
  w.add_u32("general.alignment", kGgufDefaultAlignment);
  add_arch_keys(w, arch, c);
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", pre);
  w.add_strings("tokenizer.ggml.tokens", vocab.tokens);
  w.add_i32s("tokenizer.ggml.token_type", vocab.types);
  w.add_strings("tokenizer.ggml.merges", vocab.merges);
  // The model's chat template (a fine-tuned or imported model's) for llama.cpp's chat, and the end
  // of its turns as EOS: where a reply stops.
  StateChatTemplate chat;
  const bool has_chat = chat_template_in_state(m.state, chat);
  std::optional<uint32_t> eos = eod;
  if (has_chat && !chat.eos_token.empty())
    if (auto id = tok.token_to_id(chat.eos_token)) eos = id;
  if (eod) w.add_u32("tokenizer.ggml.bos_token_id", *eod);
  if (eos) w.add_u32("tokenizer.ggml.eos_token_id", *eos);
  if (has_chat) w.add_string("tokenizer.chat_template", chat.source);
  // smelt generate encodes the prompt as it is (no BOS, no EOS); llama.cpp must do the same.
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  w.add_bool("tokenizer.ggml.add_eos_token", false);

  // Each tensor's type, decided before the header is written. Llama 3's RoPE scaling travels as
  // llama.cpp's rope_freqs.weight: per frequency, the unscaled over the scaled (convert_hf_to_gguf.py).
  ParamLayout layout = param_layout(c);
  std::vector<GgmlType> types;
  int64_t largest = 0;
  GgufExportStats st;
  std::vector<float> rope_freqs;
  if (c.rope_scaling == RopeScaling::kLlama3) {
    const std::vector<double> plain = rope_theta_freq(c.head_size(), c.rope_theta), scaled = rope_inv_freq(c);
    for (size_t i = 0; i < plain.size(); i++) rope_freqs.push_back((float)(plain[i] / scaled[i]));
    w.add_tensor("rope_freqs.weight", {(int64_t)rope_freqs.size()}, GgmlType::kF32);
  }
  for (const auto& t : layout.tensors) {  // presence and shapes: checked by weights.read below
    GgmlType g = GgmlType::kF32;
    if (t.cols > 1 && dtype == GgufDtype::kF16) g = GgmlType::kF16;
    if (t.cols > 1 && dtype == GgufDtype::kBf16) g = GgmlType::kBf16;
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
  std::vector<uint8_t> conv((size_t)largest * 2);  // F16, BF16 or Q8_0 bytes (<= 2 per value)
  Status s = w.open(tmp);
  if (s && !rope_freqs.empty()) s = w.write_tensor(rope_freqs.data(), 4 * (int64_t)rope_freqs.size());
  for (size_t i = 0; s && i < layout.tensors.size(); i++) {
    const ParamTensor& t = layout.tensors[i];
    s = weights.read(t, buf.data());  // presence and shapes checked here, naming the tensor
    if (!s) break;
    const int heads = arch == "llama" ? rope_heads(t.name, c) : 0;  // qwen2/qwen3 rotate as we do (NEOX)
    if (heads) gguf_permute_rope_rows(buf.data(), heads, c.head_size(), t.cols, false);
    switch (types[i]) {
      case GgmlType::kF32: s = w.write_tensor(buf.data(), 4 * t.size()); break;
      case GgmlType::kF16: {
        uint16_t* h = reinterpret_cast<uint16_t*>(conv.data());
        for (int64_t k = 0; k < t.size(); k++) h[k] = fp16_from_f32(buf[k]);
        s = w.write_tensor(h, 2 * t.size());
        break;
      }
      case GgmlType::kBf16: {
        uint16_t* h = reinterpret_cast<uint16_t*>(conv.data());
        bf16_from_f32_serial(h, buf.data(), t.size());
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

// Every GGUF this build reads goes through the import (import_gguf.hpp): the llama and qwen2
// architectures, F32/F16/BF16/Q8_0, the tokenizer from tokenizer.ggml.*; the context uncapped.
Status gguf_load_model(const std::string& path, ModelConfig& c, std::vector<float>& params, Tokenizer& tok,
                       GgufModelInfo* info) {
  GgufImportInfo gi;
  if (Status s = import_gguf_model(path, std::numeric_limits<int>::max(), c, params, tok, &gi); !s) return s;
  if (info) {
    *info = GgufModelInfo{};
    info->path = path;
    info->name = gi.name;
    info->pre = gi.pre;
    info->types = gi.types;
    info->file_bytes = gi.file_bytes;
    info->tokens = gi.tokens;
    // the matrices' storage (the norms are F32 in every file; q8_0 may hold F16 fallbacks)
    info->file_type = gi.types.count("Q8_0") ? "q8_0" : gi.types.count("F16") ? "f16" : gi.types.count("BF16") ? "bf16" : "f32";
  }
  return Status::ok();
}

// bf16 keeps 8 mantissa bits to f16's 11: measured --check errors on 24 random tiny models (gguf_test's
// configs, seeds 1..12, tied and untied) were bf16 4.6e-3 .. 9.3e-3 beside f16 6.7e-4 .. 1.2e-3.
double gguf_check_tolerance(const std::string& file_type) {
  if (file_type == "f32") return 0.0;
  if (file_type == "f16") return 2e-2;
  if (file_type == "bf16") return 3e-2;
  return 5e-2;
}

Status export_gguf_check(const ExportSource& src, const std::string& gguf_path, double* max_abs_diff,
                         double* rel_diff, std::string* file_type) {
  ExportWeights weights;
  if (Status s = weights.open(src); !s) return s;
  const std::string& step_dir = src.step_dir;
  const ModelConfig& ca = weights.config();
  ModelConfig cb;
  std::vector<float> pa, pb;
  if (Status s = weights.read_base(pa); !s) return s;
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
  if (Status s = export_logits_diff(ca, pa, pb, d, weights.merged() ? &weights.lora() : nullptr); !s) return s;
  const double diff = d.max_abs, scale = d.scale;
  const bool nan = d.nan;
  if (max_abs_diff) *max_abs_diff = diff;
  if (rel_diff) *rel_diff = diff / scale;
  const double tol = gguf_check_tolerance(info.file_type) + (weights.merged() ? kLoraMergeTolerance : 0.0);
  if (nan || diff > tol * scale)
    return Status::error(fmt::format("{}: logits of a fixed batch differ from the checkpoint's by up to {} ({} of "
                                     "max(1, max|logit|)); {} allows {}{}", gguf_path, diff, diff / scale,
                                     info.file_type, tol == 0 ? "none (the same fp32 values)" : fmt::format("{}", tol),
                                     nan ? "; NaN logits" : ""));
  return Status::ok();
}

}  // namespace smelt
