// Smelt's decoder in GGUF (docs/generate.md "GGUF"), both ways: export_gguf streams a checkpoint
// into one file that llama.cpp loads — its `llama` architecture (Q and K rows permuted to its
// adjacent-pair RoPE; head_dim as attention.key_length, linear RoPE scaling as keys, Llama 3's as
// rope_freqs.weight), with q/k/v biases its `qwen2`, with QK-norm its `qwen3` (both NEOX RoPE, our
// order) — with the byte-level BPE tokenizer as tokenizer.ggml.* and tensors under llama.cpp's
// names in F32 / BF16 / F16 / Q8_0; gguf_load_model reads a llama or qwen2 file back into our config,
// flat fp32 parameters and Tokenizer. Not the file format itself (gguf.hpp), not HF export.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/ckpt/export_weights.hpp"
#include "smelt/ckpt/gguf.hpp"
#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"

namespace smelt {

class Tokenizer;

// What the matrices are stored as. Norm weights stay F32 in every case (llama.cpp does the same:
// they are tiny and its norm kernels read F32). bf16: the fp32 rounded to nearest even (a NaN stays
// NaN), as the kernels' bf16_from_f32 and ggml's fp32-to-bf16 round. q8_0: a matrix whose rows are
// not whole blocks of 32 falls back to F16, as llama.cpp's convert_hf_to_gguf.py does.
enum class GgufDtype { kF32, kBf16, kF16, kQ8_0 };
const char* gguf_dtype_name(GgufDtype d);                      // "f32", "bf16", "f16", "q8_0"
Status gguf_dtype_parse(const std::string& s, GgufDtype& out);  // errors name the value and the choices

struct GgufExportStats {
  int tensors = 0;
  int64_t bytes = 0;           // file size
  int64_t largest_tensor = 0;  // fp32 bytes of the largest tensor: what export holds at once (x2)
  int f16_fallbacks = 0;       // q8_0 requested, rows not whole blocks: stored F16
  std::string pre;             // tokenizer.ggml.pre written
  std::map<std::string, int> types;  // ggml type name -> tensor count
};

// src (a checkpoint, or a LoRA run's merged: export_weights.hpp) -> out_path (written beside, renamed into place). tokenizer_path: "" = the
// checkpoint's tokenizer.json; a GGUF file without a tokenizer is useless to llama.cpp, so none is
// an error. Memory: two buffers the size of the largest tensor, whatever the model's size.
Status export_gguf(const ExportSource& src, const std::string& out_path, GgufDtype dtype,
                   const std::string& tokenizer_path = "", GgufExportStats* stats = nullptr);

// The tokenizer.ggml.pre name whose pre-tokenizer is exactly ours, from llama.cpp's
// src/llama-vocab.cpp (names -> LLAMA_VOCAB_PRE_TYPE_* -> regex): gpt2 -> "gpt-2"; llama3/cl100k
// -> "llama-bpe" when pre-tokens in the vocabulary skip the merges (ignore_merges, which
// "llama-bpe" turns on), else "dbrx" (the same regex without it); qwen2 -> "qwen2"; o200k ->
// "gpt-4o". "" for a pattern llama.cpp has no name for.
std::string gguf_pre_name(const std::string& pretokenizer, bool ignore_merges);

struct GgufModelInfo {
  std::string path;
  std::string name;         // general.name ("" when absent)
  std::string pre;          // tokenizer.ggml.pre
  std::string file_type;    // "f32", "bf16", "f16" or "q8_0": the matrices' storage
  std::map<std::string, int> types;  // ggml type name -> tensor count
  int64_t file_bytes = 0;
  nlohmann::json tokens;    // bos/eos ids and texts, chat_template (null when absent): GgufImportInfo's
};

// Loads a GGUF file as import_gguf_model does (import_gguf.hpp: the llama and qwen2 architectures,
// F32/F16/BF16/Q8_0 dequantized, Q and K rows put back into our rotate_half order, the tokenizer
// rebuilt from tokenizer.ggml.*; a Smelt file gives the tokenizer it was exported from, same
// content hash), with max_seq_len = {arch}.context_length: what generate, serve and --check read.
// Refused, naming the file and the key or tensor: whatever import_gguf_model refuses. info may be null.
Status gguf_load_model(const std::string& path, ModelConfig& c, std::vector<float>& params, Tokenizer& tok,
                       GgufModelInfo* info = nullptr);

// --check: the checkpoint and the file read back by gguf_load_model run one fixed batch (2 rows of
// up to 32 tokens) through Model. The configs must agree and the tokenizer must have the
// checkpoint's content hash; logits must be identical for an F32 file (the same fp32 values) and
// within max|diff| <= tol * max(1, max|logit|) otherwise (tol: f16 2e-2, bf16 3e-2, q8_0 5e-2; see
// docs/generate.md for the measured errors; a merged F32 file: export_hf.hpp's
// kLoraMergeTolerance, against the base with its adapters unmerged). rel_diff: max|diff| / max(1, max|logit|).
double gguf_check_tolerance(const std::string& file_type);
Status export_gguf_check(const ExportSource& src, const std::string& gguf_path, double* max_abs_diff = nullptr,
                         double* rel_diff = nullptr, std::string* file_type = nullptr);

// Our (Hugging Face) parameter name -> llama.cpp's tensor name (token_embd.weight, blk.N.attn_q.weight,
// blk.N.attn_q.bias, ...); "" for a name llama.cpp's llama/qwen2 layouts do not have. The export
// and the import both name tensors by it.
std::string gguf_tensor_name(const std::string& ours);

// The Q/K row order llama.cpp's llama architecture needs (convert_hf_to_gguf.py's permute):
// within each head of HS rows, row s*HS/2 + j (ours: element i pairs with i + HS/2) goes to row
// 2j + s (llama.cpp: adjacent pairs). w (heads*HS, cols) in place; inverse puts it back.
void gguf_permute_rope_rows(float* w, int heads, int HS, int64_t cols, bool inverse);

}  // namespace smelt
