// Hugging Face import: our parameter names are the HF Llama/Qwen names and our matrices are
// nn.Linear (out, in), so a tensor is copied as is (converted to fp32); RoPE pairs i <-> i + HS/2
// as HF's rotate_half does, so q/k need no permutation. What the config maps to and what is refused
// is in docs/import.md. Not the checkpoint writer (checkpoint.cpp) nor the export (export_hf.cpp).
#include "smelt/ckpt/import_hf.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/safetensors.hpp"
#include "smelt/common/batch.hpp"
#include "smelt/common/config.hpp"
#include "smelt/common/files.hpp"
#include "smelt/model/params.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {

namespace {

constexpr int64_t kChunkBytes = 4 << 20;  // the conversion buffer: the import's only memory besides params

struct Family {
  const char* architecture;
  int default_max_positions;  // the HF config class's default max_position_embeddings
  bool attention_bias_field;  // attention_bias would bias q, k, v and o (o_proj has no bias in Smelt)
  bool qkv_bias, qk_norm;
};
constexpr Family kFamilies[] = {
    {"LlamaForCausalLM", 2048, true, false, false},
    {"MistralForCausalLM", 131072, true, false, false},
    {"Qwen2ForCausalLM", 32768, false, true, false},
    {"Qwen3ForCausalLM", 32768, true, false, true},
};

// Typed reads of config.json: null counts as absent; a wrong type names the field.
class ConfigFields {
 public:
  ConfigFields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}
  Status error(const std::string& field, const std::string& what) const {
    return Status::error(fmt::format("{}: {} = {}: {}", where_, field, value_text(field), what));
  }
  bool has(const std::string& k) const { return j_.contains(k) && !j_[k].is_null(); }
  Status get_int(const std::string& k, int64_t& out, bool required) const {
    if (!has(k)) return required ? Status::error(fmt::format("{}: {} is missing", where_, k)) : Status::ok();
    const json& v = j_[k];
    if (!v.is_number_integer() && !(v.is_number_float() && v.get<double>() == std::floor(v.get<double>())))
      return error(k, "expected an integer");
    out = v.is_number_integer() ? v.get<int64_t>() : (int64_t)v.get<double>();
    return Status::ok();
  }
  Status get_positive(const std::string& k, int& out, bool required) const {
    int64_t v = out;
    if (Status s = get_int(k, v, required); !s) return s;
    if (v < 1 || v > (int64_t)1 << 30) return error(k, "expected a positive integer");
    out = (int)v;
    return Status::ok();
  }
  Status get_double(const std::string& k, double& out, bool required) const {
    if (!has(k)) return required ? Status::error(fmt::format("{}: {} is missing", where_, k)) : Status::ok();
    if (!j_[k].is_number()) return error(k, "expected a number");
    out = j_[k].get<double>();
    return Status::ok();
  }
  Status get_bool(const std::string& k, bool& out) const {
    if (!has(k)) return Status::ok();
    if (!j_[k].is_boolean()) return error(k, "expected true or false");
    out = j_[k].get<bool>();
    return Status::ok();
  }
  Status get_string(const std::string& k, std::string& out) const {
    if (!has(k)) return Status::ok();
    if (!j_[k].is_string()) return error(k, "expected a string");
    out = j_[k].get<std::string>();
    return Status::ok();
  }

 private:
  std::string value_text(const std::string& k) const {
    if (!j_.contains(k)) return "(missing)";
    std::string s = j_[k].dump();
    return s.size() > 80 ? s.substr(0, 77) + "..." : s;
  }
  const json& j_;
  std::string where_;
};

#define IMPORT_TRY(expr)              \
  do {                                \
    if (Status s_ = (expr); !s_) return s_; \
  } while (0)

// rope_scaling (or, in newer files, rope_parameters) -> c.rope_*.
Status read_rope(const json& j, const std::string& where, ModelConfig& c) {
  // transformers >= 4.56 may write rope_parameters {rope_type, rope_theta, ...} instead.
  const char* key = j.contains("rope_scaling") && !j["rope_scaling"].is_null() ? "rope_scaling" : "rope_parameters";
  if (!j.contains(key) || j[key].is_null()) return Status::ok();
  const json& r = j[key];
  if (!r.is_object()) return ConfigFields(j, where).error(key, "expected an object or null");
  ConfigFields f(r, fmt::format("{} {}", where, key));
  if (std::string(key) == "rope_parameters") IMPORT_TRY(f.get_double("rope_theta", c.rope_theta, false));
  std::string type = "default";
  IMPORT_TRY(f.get_string("type", type));
  IMPORT_TRY(f.get_string("rope_type", type));
  if (type == "default") return Status::ok();
  if (type == "linear") {
    c.rope_scaling = RopeScaling::kLinear;
    return f.get_double("factor", c.rope_factor, true);
  }
  if (type == "llama3") {
    c.rope_scaling = RopeScaling::kLlama3;
    IMPORT_TRY(f.get_double("factor", c.rope_factor, true));
    IMPORT_TRY(f.get_double("low_freq_factor", c.rope_low_freq_factor, true));
    IMPORT_TRY(f.get_double("high_freq_factor", c.rope_high_freq_factor, true));
    return f.get_positive("original_max_position_embeddings", c.rope_original_max_seq_len, true);
  }
  return f.error(r.contains("rope_type") ? "rope_type" : "type",
                 "not supported: Smelt's RoPE implements default, linear and llama3 scaling; yarn, dynamic, "
                 "longrope and the other types scale attention or frequencies in ways it does not");
}

// The sliding window, when the imported context is longer than it (then attention would differ).
Status check_window(const json& j, const ConfigFields& f, const std::string& arch, int context) {
  int64_t window = 0;
  bool used = false;
  if (arch == "MistralForCausalLM") {
    used = f.has("sliding_window");
  } else if (arch != "LlamaForCausalLM") {
    IMPORT_TRY(f.get_bool("use_sliding_window", used));
  }
  if (j.contains("layer_types") && j["layer_types"].is_array())
    for (const auto& t : j["layer_types"])
      if (t.is_string() && t.get<std::string>() != "full_attention") used = true;
  if (!used) return Status::ok();
  window = 4096;
  IMPORT_TRY(f.get_int("sliding_window", window, false));
  if (window >= context) {
    spdlog::info("{}: the sliding window of {} tokens never acts within the {} tokens imported", arch, window, context);
    return Status::ok();
  }
  return f.error(f.has("use_sliding_window") ? "use_sliding_window" : "sliding_window",
                 fmt::format("sliding-window attention ({} tokens) is active within the imported context of {} "
                             "tokens, and Smelt attends to the whole context; import with --max-seq-len {} or less",
                             window, context, window));
}

std::vector<int64_t> shape_of(const ParamTensor& t) {
  return t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.rows, t.cols};
}
int dtype_bytes(const std::string& d) { return d == "F32" ? 4 : (d == "F16" || d == "BF16") ? 2 : 0; }

// One source tensor, located.
struct Located {
  const SafetensorsReader* reader = nullptr;
  const SafetensorsTensor* t = nullptr;
  std::string file;
};

// Reads values [first, first + count) of src (F32/F16/BF16) as fp32, in chunks of at most
// kChunkBytes source bytes, handing each converted chunk to sink(index from first, values, n). F32
// goes straight into direct (when given) without a sink call.
template <class Sink>
Status read_converted(const Located& src, int64_t first, int64_t count, std::vector<char>& buf, float* direct,
                      Sink sink) {
  const int es = dtype_bytes(src.t->dtype);
  const int64_t per = kChunkBytes / 4;  // values per chunk
  for (int64_t i = 0; i < count; i += per) {
    const int64_t n = std::min(per, count - i);
    const int64_t at = src.t->begin + es * (first + i);
    if (src.t->dtype == "F32" && direct) {
      IMPORT_TRY(src.reader->read_at(at, direct + i, 4 * n));
      continue;
    }
    buf.resize((size_t)kChunkBytes);
    float* out = reinterpret_cast<float*>(buf.data());
    char* raw = buf.data() + (es == 2 ? 2 * n : 0);  // the 2-byte values sit in the upper half, converted upwards
    IMPORT_TRY(src.reader->read_at(at, raw, es * n));
    if (es == 2) {
      const bool bf = src.t->dtype == "BF16";
      for (int64_t k = 0; k < n; k++) {
        uint16_t h;
        std::memcpy(&h, raw + 2 * k, 2);
        out[k] = bf ? import_bf16_to_f32(h) : import_f16_to_f32(h);
      }
    }
    IMPORT_TRY(sink(i, out, n));
  }
  return Status::ok();
}

// Values [first, first + count) of src into out, as fp32.
Status read_into(const Located& src, int64_t first, int64_t count, std::vector<char>& buf, float* out) {
  return read_converted(src, first, count, buf, out, [&](int64_t i, const float* v, int64_t n) {
    std::memcpy(out + i, v, 4 * n);
    return Status::ok();
  });
}

std::string token_text(const json& v) {  // "<s>" or {"content": "<s>", ...} (an AddedToken)
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// An optional JSON file of the folder: null when absent; a parse error names the file.
Status read_optional_json(const std::string& path, json& out) {
  out = nullptr;
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::ok();
  std::string text;
  IMPORT_TRY(files_read_small(path, text));
  try {
    out = json::parse(text);
  } catch (const json::exception& e) {
    return Status::error(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  if (!out.is_object()) return Status::error(fmt::format("{}: expected a JSON object", path));
  return Status::ok();
}

}  // namespace

float import_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man x 2^-24, exact in fp32
    const float v = std::ldexp((float)man, -24);
    return sign ? -v : v;
  }
  const uint32_t bits = exp == 31 ? sign | 0x7f800000u | (man << 13)  // inf, NaN (payload kept)
                                  : sign | ((exp + 112) << 23) | (man << 13);
  return std::bit_cast<float>(bits);
}

float import_bf16_to_f32(uint16_t b) { return std::bit_cast<float>((uint32_t)b << 16); }

Status import_hf_config(const std::string& hf_dir, int max_seq_len, HfModelInfo& info) {
  const std::string path = (fs::path(hf_dir) / "config.json").string();
  std::string text;
  IMPORT_TRY(files_read_small(path, text));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return Status::error(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  if (!j.is_object()) return Status::error(fmt::format("{}: expected a JSON object", path));
  if (!j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
      !j["architectures"][0].is_string())
    return Status::error(fmt::format("{}: architectures is missing (expected e.g. [\"LlamaForCausalLM\"])", path));
  const std::string arch = j["architectures"][0].get<std::string>();
  const Family* fam = nullptr;
  for (const Family& f : kFamilies)
    if (arch == f.architecture) fam = &f;
  if (!fam)
    return Status::error(fmt::format("{}: architectures = {}: not supported; Smelt imports LlamaForCausalLM, "
                                     "MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM (docs/import.md)",
                                     path, j["architectures"].dump()));
  const std::string where = fmt::format("{} ({})", path, arch);
  ConfigFields f(j, where);
  ModelConfig c;
  IMPORT_TRY(f.get_positive("hidden_size", c.d_model, true));
  IMPORT_TRY(f.get_positive("intermediate_size", c.ffn_hidden, true));
  IMPORT_TRY(f.get_positive("num_attention_heads", c.n_heads, true));
  c.n_kv_heads = c.n_heads;
  IMPORT_TRY(f.get_positive("num_key_value_heads", c.n_kv_heads, false));
  IMPORT_TRY(f.get_positive("num_hidden_layers", c.n_layers, true));
  IMPORT_TRY(f.get_positive("vocab_size", c.vocab_size, true));
  int head_dim = c.d_model % c.n_heads == 0 ? c.d_model / c.n_heads : 0;
  IMPORT_TRY(f.get_positive("head_dim", head_dim, head_dim == 0));
  c.head_dim = c.d_model % c.n_heads == 0 && head_dim == c.d_model / c.n_heads ? 0 : head_dim;
  c.norm_eps = 1e-6;
  IMPORT_TRY(f.get_double("rms_norm_eps", c.norm_eps, false));
  c.rope_theta = 10000.0;
  IMPORT_TRY(f.get_double("rope_theta", c.rope_theta, false));
  c.tie_embeddings = false;
  IMPORT_TRY(f.get_bool("tie_word_embeddings", c.tie_embeddings));
  IMPORT_TRY(f.get_double("initializer_range", c.init_std, false));
  if (!(c.init_std > 0)) c.init_std = 0.02;
  int max_pos = fam->default_max_positions;
  IMPORT_TRY(f.get_positive("max_position_embeddings", max_pos, false));
  c.qkv_bias = fam->qkv_bias;
  c.qk_norm = fam->qk_norm;

  std::string act = "silu";
  IMPORT_TRY(f.get_string("hidden_act", act));
  if (act != "silu")
    return f.error("hidden_act", "Smelt's MLP is SwiGLU with SiLU; another activation would compute a different model");
  bool mlp_bias = false, attention_bias = false;
  IMPORT_TRY(f.get_bool("mlp_bias", mlp_bias));
  if (mlp_bias) return f.error("mlp_bias", "Smelt's MLP projections have no bias");
  IMPORT_TRY(f.get_bool("attention_bias", attention_bias));
  if (attention_bias && fam->attention_bias_field)
    return f.error("attention_bias", "it gives q, k, v and o_proj a bias, and Smelt's o_proj has none");
  if (f.has("quantization_config"))
    return f.error("quantization_config", "quantized weights are not imported; give the F32/F16/BF16 checkpoint");
  IMPORT_TRY(read_rope(j, where, c));
  c.max_seq_len = std::min(max_pos, max_seq_len);
  IMPORT_TRY(check_window(j, f, arch, c.max_seq_len));
  if (Status s = model_config_validate(c); !s) return Status::error(fmt::format("{}: {}", where, s.message()));
  info.architecture = arch;
  info.config = c;
  info.max_position_embeddings = max_pos;
  info.config_json = std::move(j);
  return Status::ok();
}

struct HfWeights::Impl {
  std::vector<std::unique_ptr<SafetensorsReader>> readers;
  std::vector<std::string> files;
  std::map<std::string, Located> where;  // tensor name -> its file
  std::string source;                    // the one file, or the index
  HfWeightStats stats;

  Status open_file(const std::string& p);
  Status open_files(const std::string& hf_dir);
  Status account(const ModelConfig& c, const Located*& tied_head);
  Status check_tied_head(const ModelConfig& c, const Located& head);
};

Status HfWeights::Impl::open_file(const std::string& p) {
  auto r = std::make_unique<SafetensorsReader>();
  IMPORT_TRY(r->open(p));
  for (const auto& t : r->tensors()) {
    auto [it, fresh] = where.emplace(t.name, Located{r.get(), &t, p});
    if (!fresh)
      return Status::error(fmt::format("{}: tensor {} is also in {}: which one is meant?", p, t.name, it->second.file));
  }
  files.push_back(p);
  readers.push_back(std::move(r));
  return Status::ok();
}

// model.safetensors, or the shards model.safetensors.index.json names (each tensor where it says).
Status HfWeights::Impl::open_files(const std::string& hf_dir) {
  std::error_code ec;
  const std::string index_path = (fs::path(hf_dir) / "model.safetensors.index.json").string();
  const std::string single_path = (fs::path(hf_dir) / "model.safetensors").string();
  if (fs::exists(index_path, ec)) {
    json idx;
    IMPORT_TRY(read_optional_json(index_path, idx));
    if (!idx.contains("weight_map") || !idx["weight_map"].is_object())
      return Status::error(fmt::format("{}: weight_map is missing (expected {{tensor: shard file}})", index_path));
    std::vector<std::string> shards;
    for (const auto& [name, file] : idx["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
        return Status::error(fmt::format("{}: weight_map.{} = {}: expected a file name in this folder", index_path, name,
                                         file.dump()));
      if (std::find(shards.begin(), shards.end(), file.get<std::string>()) == shards.end())
        shards.push_back(file.get<std::string>());
    }
    for (const auto& sh : shards) IMPORT_TRY(open_file((fs::path(hf_dir) / sh).string()));
    for (const auto& [name, file] : idx["weight_map"].items()) {
      auto it = where.find(name);
      const std::string want = (fs::path(hf_dir) / file.get<std::string>()).string();
      if (it == where.end() || it->second.file != want)
        return Status::error(fmt::format("{}: weight_map puts {} in {}, which has no such tensor", index_path, name,
                                         file.get<std::string>()));
    }
  } else if (fs::exists(single_path, ec)) {
    IMPORT_TRY(open_file(single_path));
  } else {
    return Status::error(fmt::format("{}: neither model.safetensors nor model.safetensors.index.json (PyTorch .bin "
                                     "files are not read: save the model with safe_serialization=True)", hf_dir));
  }
  source = files.size() == 1 ? files[0] : index_path;
  return Status::ok();
}

// Every tensor accounted for (the layout's with their shapes and a dtype Smelt reads; a tied head;
// ignored buffers) before any data is read.
Status HfWeights::Impl::account(const ModelConfig& c, const Located*& tied_head) {
  const ParamLayout layout = param_layout(c);
  std::set<std::string> wanted;
  for (const auto& t : layout.tensors) wanted.insert(t.name);
  const std::string kHead = "lm_head.weight";
  for (const auto& [name, loc] : where) {
    if (wanted.count(name)) continue;
    if (name == kHead && c.tie_embeddings) {
      tied_head = &loc;
      continue;
    }
    if (name.size() >= 20 && name.compare(name.size() - 20, 20, ".rotary_emb.inv_freq") == 0) {
      stats.ignored.push_back(name);
      continue;
    }
    return Status::error(fmt::format("{}: tensor {} ({} [{}]) is not a parameter of the model config.json describes "
                                     "(Smelt would drop it and compute a different model)",
                                     loc.file, name, loc.t->dtype, fmt::join(loc.t->shape, ", ")));
  }
  auto check = [&](const std::string& name, const Located& loc, const std::vector<int64_t>& shape) -> Status {
    if (dtype_bytes(loc.t->dtype) == 0)
      return Status::error(fmt::format("{}: tensor {} is {}: Smelt imports F32, F16 and BF16 tensors", loc.file, name,
                                       loc.t->dtype));
    if (loc.t->shape != shape)
      return Status::error(fmt::format("{}: tensor {} has shape [{}], config.json needs [{}]", loc.file, name,
                                       fmt::join(loc.t->shape, ", "), fmt::join(shape, ", ")));
    return Status::ok();
  };
  for (const auto& t : layout.tensors) {
    auto it = where.find(t.name);
    if (it == where.end())
      return Status::error(fmt::format("{}: no tensor {} (config.json describes a {}model with it)", source, t.name,
                                       t.name == kHead ? "untied (tie_word_embeddings false) " : ""));
    IMPORT_TRY(check(t.name, it->second, shape_of(t)));
    const Located& loc = it->second;
    stats.tensors++;
    stats.dtypes[loc.t->dtype]++;
    stats.dtype_bytes[loc.t->dtype] += loc.t->bytes();
    stats.source_bytes += loc.t->bytes();
    stats.largest_source_tensor = std::max(stats.largest_source_tensor, loc.t->bytes());
  }
  if (tied_head) IMPORT_TRY(check(kHead, *tied_head, {c.vocab_size, c.d_model}));
  return Status::ok();
}

// A tied model's lm_head.weight: the same values as the embedding, or the config's tie is wrong.
// Compared a chunk at a time.
Status HfWeights::Impl::check_tied_head(const ModelConfig& c, const Located& head) {
  const std::string kEmbed = "model.embed_tokens.weight";
  const Located& emb = where.at(kEmbed);
  std::vector<char> buf, ebuf;
  std::vector<float> e;
  IMPORT_TRY(read_converted(head, 0, (int64_t)c.vocab_size * c.d_model, buf, nullptr,
                            [&](int64_t i, const float* v, int64_t n) -> Status {
                              e.resize((size_t)n);
                              IMPORT_TRY(read_into(emb, i, n, ebuf, e.data()));
                              if (std::memcmp(e.data(), v, 4 * n) == 0) return Status::ok();
                              int64_t k = 0;
                              while (std::memcmp(e.data() + k, v + k, 4) == 0) k++;
                              return Status::error(fmt::format(
                                  "{}: config.json says tie_word_embeddings = true but lm_head.weight differs from "
                                  "{} (first at row {}, column {}: {} vs {}); set tie_word_embeddings to false "
                                  "if the head is its own",
                                  head.file, kEmbed, (i + k) / c.d_model, (i + k) % c.d_model, v[k], e[k]));
                            }));
  stats.ignored.push_back("lm_head.weight (equal to " + kEmbed + ")");
  return Status::ok();
}

HfWeights::HfWeights() = default;
HfWeights::~HfWeights() = default;

Status HfWeights::open(const std::string& hf_dir, const ModelConfig& c) {
  impl_ = std::make_unique<Impl>();
  IMPORT_TRY(impl_->open_files(hf_dir));
  const Located* tied_head = nullptr;
  IMPORT_TRY(impl_->account(c, tied_head));
  if (tied_head) IMPORT_TRY(impl_->check_tied_head(c, *tied_head));
  impl_->stats.shards = (int)impl_->files.size();
  return Status::ok();
}

Status HfWeights::read_rows(const ParamTensor& t, int64_t row0, int64_t rows, float* out) const {
  if (!impl_) return Status::error(fmt::format("tensor {}: no weights are open", t.name));
  auto it = impl_->where.find(t.name);
  if (it == impl_->where.end()) return Status::error(fmt::format("tensor {}: not among the opened weights", t.name));
  if (row0 < 0 || rows < 0 || row0 + rows > t.rows)
    return Status::error(fmt::format("tensor {}: rows [{}, {}) outside its {}", t.name, row0, row0 + rows, t.rows));
  std::vector<char> buf;
  return read_into(it->second, row0 * t.cols, rows * t.cols, buf, out);
}

const HfWeightStats& HfWeights::stats() const {
  static const HfWeightStats kNone;
  return impl_ ? impl_->stats : kNone;
}

Status import_hf_weights(const std::string& hf_dir, const ModelConfig& c, std::vector<float>& params,
                         HfWeightStats* stats) {
  HfWeights w;
  IMPORT_TRY(w.open(hf_dir, c));
  const ParamLayout layout = param_layout(c);
  params.assign((size_t)layout.total, 0.0f);
  for (const auto& t : layout.tensors) IMPORT_TRY(w.read(t, params.data() + t.offset));
  if (stats) *stats = w.stats();
  return Status::ok();
}

Status import_check_destination(const std::string& run_dir, bool force, std::vector<std::string>& old_steps) {
  std::error_code ec;
  const fs::path ckpt_dir = fs::path(run_dir) / "checkpoints";
  old_steps.clear();
  if (!fs::exists(ckpt_dir, ec)) return Status::ok();
  int entries = 0;
  for (const auto& e : fs::directory_iterator(ckpt_dir, ec)) {
    entries++;
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0 && n != "step_00000000") old_steps.push_back(e.path().string());
  }
  if (entries > 0 && !force)
    return Status::error(fmt::format("{}: not empty ({} entries); the import writes step_00000000 there: choose "
                                     "another --output or give --force to replace those checkpoints",
                                     ckpt_dir.string(), entries));
  return Status::ok();
}

Status import_save_step0(const std::string& run_dir, const ModelConfig& c, const ImportTensorReader& read,
                         const std::string& config_toml, const std::string& tokenizer_path, const nlohmann::json& st,
                         const std::vector<std::string>& old_steps, ImportSaved& out) {
  std::error_code ec;
  const ParamLayout layout = param_layout(c);
  CkptSaveRequest r;
  r.step = 0;
  r.config_toml = config_toml;
  r.tokenizer_path = tokenizer_path;
  r.state = {{"step", 0}, {"import", st}};
  for (const auto& t : layout.tensors)
    r.tensors.push_back({t.name, shape_of(t), nullptr, [&read, &t](float* out) { return read(t, out); }});
  const fs::path ckpt_dir = fs::path(run_dir) / "checkpoints";
  const bool made_run = !fs::exists(run_dir, ec), made_ckpt = !fs::exists(ckpt_dir, ec);
  CkptSaveStats ss;
  if (Status s = ckpt_save(run_dir, r, &ss); !s) {
    if (made_ckpt) fs::remove(ckpt_dir, ec);  // only when empty: ckpt_save removed its .tmp folder
    if (made_run) fs::remove(run_dir, ec);
    return s;
  }
  // --force: the other steps go once step 0 is committed (a newer step would otherwise be "latest").
  out = ImportSaved{};
  out.step_dir = ss.dir;
  for (const auto& p : old_steps) {
    const std::string del = p + ".del.tmp";
    fs::rename(p, del, ec);
    if (!ec) fs::remove_all(del, ec);
    if (ec)
      return Status::error(fmt::format("{}: cannot remove: {} (the import is committed in {})", p, ec.message(),
                                       ss.dir));
    out.removed.push_back(p);
  }
  return Status::ok();
}

Status import_hf(const HfImportOptions& o, HfImportResult& out) {
  out = HfImportResult{};
  IMPORT_TRY(import_hf_config(o.hf_dir, o.max_seq_len, out.info));
  const ModelConfig& c = out.info.config;

  // The tokenizer: Smelt's byte-level BPE loader, or the reason it cannot read it.
  std::error_code ec;
  const std::string tok_path =
      o.tokenizer_path.empty() ? (fs::path(o.hf_dir) / "tokenizer.json").string() : o.tokenizer_path;
  const char* hint = o.tokenizer_path.empty() ? "; give a byte-level BPE tokenizer.json with --tokenizer FILE" : "";
  if (!fs::exists(tok_path, ec))
    return Status::error(fmt::format("{}: no such file{}", tok_path, hint));
  Tokenizer tok;
  if (Status s = Tokenizer::load(tok_path, tok); !s)
    return Status::error(fmt::format("{}: {}{}", tok_path, s.message(), hint));
  if ((int64_t)tok.vocab_size() > c.vocab_size)
    return Status::error(fmt::format("{}: tokenizer vocabulary {} exceeds config.json vocab_size {}", tok_path,
                                     tok.vocab_size(), c.vocab_size));
  json tc, gen;
  IMPORT_TRY(read_optional_json((fs::path(o.hf_dir) / "tokenizer_config.json").string(), tc));
  IMPORT_TRY(read_optional_json((fs::path(o.hf_dir) / "generation_config.json").string(), gen));
  json st = {{"source", fs::absolute(o.hf_dir).lexically_normal().string()},
             {"architecture", out.info.architecture},
             {"max_position_embeddings", out.info.max_position_embeddings},
             {"max_seq_len", c.max_seq_len},
             {"tokenizer", fs::absolute(tok_path).lexically_normal().string()}};
  for (const char* role : {"bos", "eos"}) {  // tokenizer_config.json's token, else config.json's id
    std::string text = tc.is_object() && tc.contains(std::string(role) + "_token") ? token_text(tc[std::string(role) + "_token"]) : "";
    json id = nullptr;
    if (!text.empty()) {
      if (auto t = tok.token_to_id(text)) id = *t;
      else spdlog::warn("{}: {}_token {} is not in {}", o.hf_dir, role, text, tok_path);
    } else if (out.info.config_json.contains(std::string(role) + "_token_id")) {
      id = out.info.config_json[std::string(role) + "_token_id"];
    }
    st[std::string(role) + "_token"] = text.empty() ? json(nullptr) : json(text);
    st[std::string(role) + "_token_id"] = id;
  }
  st["add_bos_token"] = tc.is_object() && tc.contains("add_bos_token") ? tc["add_bos_token"] : json(nullptr);
  st["chat_template"] = tc.is_object() && tc.contains("chat_template") ? tc["chat_template"] : json(nullptr);
  st["generation_config"] = gen;
  st["hf_config"] = out.info.config_json;

  // The destination: refused before the weights are read when it holds checkpoints.
  std::vector<std::string> old_steps;
  IMPORT_TRY(import_check_destination(o.run_dir, o.force, old_steps));

  HfWeights weights;
  IMPORT_TRY(weights.open(o.hf_dir, c));
  const ParamLayout layout = param_layout(c);

  const std::string config_toml =
      o.config_toml ? o.config_toml(c, tok.eod_id() ? (int64_t)*tok.eod_id() : -1)
                    : config_to_string(toml::table{{"model", model_config_to_toml(c)}});
  ImportSaved saved;
  IMPORT_TRY(import_save_step0(o.run_dir, c, [&](const ParamTensor& t, float* v) { return weights.read(t, v); },
                               config_toml, tok_path, st, old_steps, saved));
  out.weights = weights.stats();
  out.removed = std::move(saved.removed);
  out.step_dir = saved.step_dir;
  out.tokenizer_path = tok_path;
  out.params = layout.total;
  out.import_state = std::move(st);
  return Status::ok();
}

Status import_model_init(Model& m, const ModelConfig& c, std::vector<float>&& params, int T, int threads,
                         Precision precision) {
  ModelConfig run = c;
  run.recompute = true;  // forward only: one layer's activations are enough
  if (threads <= 0) threads = (int)std::max(1u, std::thread::hardware_concurrency());
  m.set_precision(precision);
  IMPORT_TRY(m.init(run, 1, std::min(T, c.max_seq_len), threads, 0));
  if ((int64_t)params.size() != m.layout().total)
    return Status::error(fmt::format("{} parameters given, the model has {}", params.size(), m.layout().total));
  std::copy(params.begin(), params.end(), m.params());
  std::vector<float>().swap(params);
  return Status::ok();
}

Status import_logprobs(Model& m, const std::vector<int32_t>& tokens, std::vector<float>& out) {
  const ModelConfig& c = m.config();
  const int T = (int)tokens.size();
  if (T < 1 || T > m.acts().T)
    return Status::error(fmt::format("{} tokens: expected 1 to {}", T, m.acts().T));
  for (int32_t id : tokens)
    if (id < 0 || id >= c.vocab_size) return Status::error(fmt::format("token id {} outside [0, {})", id, c.vocab_size));
  Batch b;
  b.B = 1;
  b.T = T;
  b.inputs = tokens;
  b.targets.assign(T, -1);
  float loss = 0;
  IMPORT_TRY(m.forward(b, loss));
  const int64_t V = c.vocab_size;
  out.resize((size_t)T * V);
  const float* logits = m.acts().logits;
  for (int t = 0; t < T; t++) {  // log softmax in double
    const float* z = logits + (int64_t)t * V;
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; v++) mx = std::max(mx, (double)z[v]);
    for (int64_t v = 0; v < V; v++) sum += std::exp((double)z[v] - mx);
    const double lse = mx + std::log(sum);
    for (int64_t v = 0; v < V; v++) out[(size_t)t * V + v] = (float)((double)z[v] - lse);
  }
  return Status::ok();
}

double LogprobDiff::tolerance() const { return 1e-4 * std::max(1.0, ref_max_abs); }

LogprobDiff import_compare_logprobs(const float* ref, const float* ours, int64_t T, int64_t V,
                                    const std::vector<int32_t>& tokens) {
  LogprobDiff d;
  double kl = 0;
  for (int64_t t = 0; t < T; t++) {
    double row = 0;
    for (int64_t v = 0; v < V; v++) {
      const double a = ref[t * V + v], b = ours[t * V + v];
      if (std::isnan(a) || std::isnan(b)) {
        d.nan = true;
        continue;
      }
      d.max_abs = std::max(d.max_abs, std::fabs(a - b));
      d.ref_max_abs = std::max(d.ref_max_abs, std::fabs(a));
      if (std::isfinite(a)) row += std::exp(a) * (a - b);
    }
    kl += row;
  }
  d.mean_kl = T > 0 ? kl / (double)T : 0;
  int64_t n = 0;
  for (int64_t t = 0; t + 1 < T && t + 1 < (int64_t)tokens.size(); t++, n++) {
    d.ref_nll -= ref[t * V + tokens[t + 1]];
    d.our_nll -= ours[t * V + tokens[t + 1]];
  }
  if (n > 0) d.ref_nll /= (double)n, d.our_nll /= (double)n;
  return d;
}

}  // namespace smelt
