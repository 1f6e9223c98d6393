// Import of a GGUF file written by llama.cpp's tools (convert_hf_to_gguf.py, llama-quantize) or by
// Smelt's export (docs/import.md "GGUF"): the `llama`, `qwen2` and `qwen3` architectures, tensors in
// F32, F16, BF16 or Q8_0 dequantized to fp32, Q/K rows put back into our rotate_half order (llama
// only; qwen2 and qwen3 are NEOX RoPE), a byte-level BPE tokenizer rebuilt from tokenizer.ggml.*, written as step 0 of a
// Smelt run through ckpt_save. Whatever would make Smelt compute something else is refused by name.
// Not the GGUF bytes (gguf.hpp) and not the export (export_gguf.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"
#include "smelt/model/config.hpp"

namespace smelt {

class Tokenizer;

struct GgufImportInfo {
  std::string architecture;           // general.architecture: "llama", "qwen2" or "qwen3"
  std::string name;                   // general.name ("" when absent)
  std::string pre;                    // tokenizer.ggml.pre
  int context_length = 0;             // {arch}.context_length, as the file says
  std::map<std::string, int> types;   // ggml type name -> tensors
  std::string rope;                   // how RoPE was read: "plain", "linear factor 4", "rope_freqs.weight -> llama3 ..."
  double rope_freqs_max_rel = 0;      // rope_freqs.weight: largest |ours / file - 1| of the frequencies
  nlohmann::json tokens;              // bos/eos/pad ids and texts, add_bos_token, chat_template (null when absent)
  int64_t file_bytes = 0;
};

// path -> c (max_seq_len = min({arch}.context_length, max_seq_len)), params (fp32, param_layout(c)
// order, as ckpt_load_model gives), tok. The file must be GGUF v3 of architecture llama or qwen2:
//   metadata: {arch}.{context_length, embedding_length, block_count, feed_forward_length,
//     attention.head_count[_kv], rope.freq_base, attention.layer_norm_rms_epsilon} (head size from
//     attention.key_length when present, else embedding_length / head_count; value_length and
//     rope.dimension_count must equal it), rope.scaling.type none or linear (+ rope.scaling.factor);
//     any other {arch}.* key is refused by name, as are tokenizer.ggml.* keys Smelt does not read;
//   tensors: llama.cpp's names for every tensor of param_layout(c) (biases blk.N.attn_{q,k,v}.bias:
//     qwen2 always, llama when present), output.weight absent = tied; rope_freqs.weight (llama, Llama
//     3.1+) is read as our llama3 scaling when the factors it derives reproduce the tensor (else
//     refused by name); any other tensor, and any type but F32/F16/BF16/Q8_0, refused by name;
//   tokenizer.ggml.model "gpt2" with a pre-tokenizer Smelt has (gpt-2, llama-bpe, dbrx, smaug-bpe,
//     qwen2, gpt-4o); "llama" (SentencePiece) and others refused by name.
Status import_gguf_model(const std::string& path, int max_seq_len, ModelConfig& c, std::vector<float>& params,
                         Tokenizer& tok, GgufImportInfo* info = nullptr);

// The same file read a tensor at a time (the import streams it into the checkpoint): open reads
// and checks everything import_gguf_model does (c, tok, info) but no tensor's values; read
// dequantizes one tensor of param_layout(c) into out (t.size() floats), Q/K rows put back. The
// file stays mapped while this lives.
struct ParamTensor;
class GgufWeights {
 public:
  GgufWeights();
  ~GgufWeights();
  Status open(const std::string& path, int max_seq_len, ModelConfig& c, Tokenizer& tok, GgufImportInfo* info = nullptr);
  Status read(const ParamTensor& t, float* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct GgufImportOptions {
  std::string gguf_path;
  std::string run_dir;          // the checkpoint goes to run_dir/checkpoints/step_00000000
  int max_seq_len = 4096;       // cap on {arch}.context_length
  bool force = false;           // replace the checkpoints already in run_dir/checkpoints
  // The resolved config stored with the checkpoint, from the imported [model] and the tokenizer's
  // end-of-document id (-1: none); unset: the [model] section alone (HfImportOptions::config_toml).
  std::function<std::string(const ModelConfig&, int64_t eod_id)> config_toml;
};

struct GgufImportResult {
  ModelConfig config;
  GgufImportInfo info;
  std::string step_dir;               // the committed checkpoint
  int64_t params = 0;                 // floats
  nlohmann::json import_state;        // the checkpoint's state under "import"
  std::vector<std::string> removed;   // --force: the checkpoints replaced
};

// The whole import: import_gguf_model, then ckpt_save of step 0 with the rebuilt tokenizer as
// tokenizer.json and the file's token settings under "import" in the state (the keys import_hf
// writes: bos/eos token and id, add_bos_token, chat_template). A non-empty run_dir/checkpoints is
// refused unless force (then the other steps are removed once step 0 is committed). Everything is
// read and checked before anything is written.
Status import_gguf(const GgufImportOptions& o, GgufImportResult& out);

}  // namespace smelt
