// Import of a Hugging Face checkpoint folder (docs/import.md): config.json of LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM -> ModelConfig; model.safetensors (or
// the shards of model.safetensors.index.json) in F32/F16/BF16 -> fp32, one tensor at a time; the
// tokenizer and its settings kept; written as step 0 of a Smelt run through ckpt_save. Everything
// Smelt's decoder would compute differently is refused by name. Not the export (export_hf.hpp).
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
#include "smelt/model/model.hpp"
#include "smelt/model/params.hpp"

namespace smelt {

// What config.json says, mapped (import_hf_config).
struct HfModelInfo {
  std::string architecture;          // "Qwen3ForCausalLM"
  ModelConfig config;                // max_seq_len = min(max_position_embeddings, the cap asked for)
  int max_position_embeddings = 0;   // as the file says (or the class's default)
  nlohmann::json config_json;        // the whole file, kept with the checkpoint
};

// Reads DIR/config.json into info. max_seq_len caps the context (RoPE table, serving caches).
// Refused, naming the file, the architecture and the field: another architecture, hidden_act other
// than silu, mlp_bias, attention_bias (Llama, Mistral, Qwen3: it biases o_proj too), rope_scaling
// other than default/linear/llama3, a sliding window shorter than the context imported,
// quantization_config.
Status import_hf_config(const std::string& hf_dir, int max_seq_len, HfModelInfo& info);

// The exact fp32 value of an IEEE half (subnormals, inf, NaN kept) and of a bfloat16 (the top 16
// bits of an fp32).
float import_f16_to_f32(uint16_t h);
float import_bf16_to_f32(uint16_t b);

struct HfWeightStats {
  int shards = 0;                         // safetensors files read
  int tensors = 0;                        // parameters imported
  std::vector<std::string> ignored;       // buffers (rotary_emb.inv_freq), a tied head equal to the embedding
  std::map<std::string, int> dtypes;      // source dtype -> tensors
  std::map<std::string, int64_t> dtype_bytes;  // source dtype -> bytes
  int64_t source_bytes = 0;               // of the parameters read
  int64_t largest_source_tensor = 0;      // bytes (the import holds one tensor at a time, as fp32)
};

// The weights of DIR/model.safetensors or DIR/model.safetensors.index.json (+ its shards), read a
// tensor (or a range of its rows) at a time as fp32. open checks them all before any is read:
// every tensor of param_layout(c) there with its shape ((rows, cols) or (size,)) in F32, F16 or
// BF16; a tied model's lm_head.weight ignored when it equals the embedding (compared a chunk at a
// time) and refused otherwise; *.rotary_emb.inv_freq ignored; any other tensor refused by name.
// Memory: the files' headers and a 4 MiB conversion buffer per read; the caller holds the values.
class HfWeights {
 public:
  HfWeights();
  ~HfWeights();
  Status open(const std::string& hf_dir, const ModelConfig& c);
  // Rows [row0, row0 + rows) of t, a tensor of param_layout(c) (whole, not a shard's box), into out
  // (rows x t.cols floats).
  Status read_rows(const ParamTensor& t, int64_t row0, int64_t rows, float* out) const;
  Status read(const ParamTensor& t, float* out) const { return read_rows(t, 0, t.rows, out); }
  const HfWeightStats& stats() const;  // shards, tensors, dtypes, ignored: known once open

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Every tensor of HfWeights into params, a flat fp32 buffer in param_layout(c) order (the exports'
// round trip and the tests; the import itself streams).
Status import_hf_weights(const std::string& hf_dir, const ModelConfig& c, std::vector<float>& params,
                         HfWeightStats* stats = nullptr);

struct HfImportOptions {
  std::string hf_dir;
  std::string run_dir;          // the checkpoint goes to run_dir/checkpoints/step_00000000
  int max_seq_len = 4096;       // cap on max_position_embeddings
  std::string tokenizer_path;   // "" = hf_dir/tokenizer.json
  bool force = false;           // replace the checkpoints already in run_dir/checkpoints
  // The resolved config stored with the checkpoint (config.toml, manifest config_toml), from the
  // imported [model] and the tokenizer's end-of-document id (-1: none). Unset: the [model] section
  // alone. The CLI adds [data].
  std::function<std::string(const ModelConfig&, int64_t eod_id)> config_toml;
};

struct HfImportResult {
  HfModelInfo info;
  HfWeightStats weights;
  std::string step_dir;       // the committed checkpoint
  std::string tokenizer_path; // the tokenizer copied into it
  int64_t params = 0;         // floats
  nlohmann::json import_state;  // what went into the checkpoint's state under "import"
  std::vector<std::string> removed;  // --force: the checkpoints replaced
};

// What both imports (this and import_gguf.hpp) share. import_check_destination refuses a non-empty
// RUN/checkpoints unless force, listing the steps other than step 0 it holds; import_save_step0
// writes step 0 through ckpt_save, each tensor of param_layout(c) asked of `read` when its turn
// comes (one tensor in memory at a time), with the resolved config, the tokenizer file and the
// state {"step": 0, "import": st} (a failed save removes the folders it created), then removes
// old_steps (--force: a newer step would otherwise be "latest").
Status import_check_destination(const std::string& run_dir, bool force, std::vector<std::string>& old_steps);
struct ImportSaved {
  std::string step_dir;              // the committed checkpoint
  std::vector<std::string> removed;  // old_steps, removed
};
using ImportTensorReader = std::function<Status(const ParamTensor& t, float* out)>;
Status import_save_step0(const std::string& run_dir, const ModelConfig& c, const ImportTensorReader& read,
                         const std::string& config_toml, const std::string& tokenizer_path, const nlohmann::json& st,
                         const std::vector<std::string>& old_steps, ImportSaved& out);

// The whole import: config, tokenizer (Tokenizer::load; its vocabulary must fit vocab_size), the
// tokenizer's settings (tokenizer_config.json: bos/eos tokens and ids, add_bos_token,
// chat_template; generation_config.json) into the checkpoint's state under "import", weights, then
// ckpt_save of step 0. Refuses a non-empty run_dir/checkpoints unless force (then the other steps
// are removed once step 0 is committed). Everything is read and checked before anything is
// written; a failed save leaves no step folder (ckpt_save) and no folder the import created.
Status import_hf(const HfImportOptions& o, HfImportResult& out);

// --check: a forward-only Model of c for sequences of up to T tokens, holding params (moved in
// and freed: the model keeps the only copy), its linear layers in `precision`. threads: 0 = every
// core.
Status import_model_init(Model& m, const ModelConfig& c, std::vector<float>&& params, int T, int threads = 0,
                         Precision precision = Precision::kFp32);
// Next-token log-probabilities of one sequence under that model (the training forward, fp32): out
// is (T, V), row t = log softmax of the logits after tokens[0..t], computed in double.
Status import_logprobs(Model& m, const std::vector<int32_t>& tokens, std::vector<float>& out);

// ref against ours, both (T, V) log-probabilities: the largest |difference| over every entry, the
// largest |ref| (the scale the tolerance is relative to), the mean over rows of KL(ref || ours)
// (nats), and the mean negative log-likelihood of the sequence's next tokens under each.
struct LogprobDiff {
  double max_abs = 0, ref_max_abs = 0, mean_kl = 0;
  double ref_nll = 0, our_nll = 0;  // mean over t < T-1 of -logprob[t][tokens[t+1]]
  bool nan = false;
  double tolerance() const;         // 1e-4 * max(1, ref_max_abs) (docs/import.md)
  bool passed() const { return !nan && max_abs <= tolerance(); }
};
// --check's bound on Smelt's bf16 forward (bf16 GEMM inputs, fp32 accumulation; the weights
// exact): the mean KL(ref || ours) over a text's positions, in nats (docs/import.md, "--check").
constexpr double kImportBf16MeanKl = 2e-3;
LogprobDiff import_compare_logprobs(const float* ref, const float* ours, int64_t T, int64_t V,
                                    const std::vector<int32_t>& tokens);

}  // namespace smelt
