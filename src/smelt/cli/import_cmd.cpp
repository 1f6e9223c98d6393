// `smelt import --hf DIR --output RUN`: a Hugging Face checkpoint folder -> step 0 of a Smelt run
// (docs/import.md); `--gguf FILE` the same from a llama.cpp GGUF file (ckpt/import_gguf.cpp), with a resolved config that eval, generate, serve, export and train read;
// --check runs the imported model on real text beside an independent PyTorch forward of the source
// folder (tests/reference/hf_family.py). Not the import itself (ckpt/import_hf.cpp).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/import_gguf.hpp"
#include "smelt/ckpt/import_hf.hpp"
#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/config.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/log.hpp"
#include "smelt/dataset/loader_config.hpp"
#include "smelt/model/params.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "smelt/train/step_report.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace smelt {

namespace {

constexpr int kCheckTokens = 64;  // per text: enough positions to exercise RoPE, cheap for the reference

// The built-in check texts: ordinary English and Chinese prose (written for this check).
constexpr const char* kCheckEnglish =
    "The river rises in the hills above the town and runs south through farmland for about forty miles "
    "before it reaches the sea. In spring the water is high and fast, and the old stone bridge near the "
    "market has been repaired many times. Fishermen still gather there early in the morning, talking "
    "about the weather and the price of bread.";
constexpr const char* kCheckChinese =
    "这条河发源于小镇北面的山丘，向南流经大片农田，大约六十公里后注入大海。春天河水上涨，水流湍急，"
    "集市旁边那座古老的石桥已经修过很多次。每天清晨，渔民们仍然聚在桥头，谈论天气和面包的价格。"
    "孩子们放学后喜欢在河岸上奔跑，老人们则坐在树荫下下棋。";

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// The resolved config of an imported run: [model] as imported and [data] with every key at its
// default, rows no longer than the model's context and the tokenizer's end-of-document id, so
// `smelt eval` reads its batch shape and `smelt train --resume` (same [model]) starts from it.
std::string import_config_toml(const ModelConfig& c, int64_t eod_id) {
  toml::table data{{"seq_len", std::min(512, c.max_seq_len)}};
  if (eod_id >= 0) data.insert_or_assign("eod_id", eod_id);
  else data.insert_or_assign("append_eod", false);
  toml::table root{{"data", data}};
  LoaderConfig lc;
  toml::table resolved;
  (void)loader_config_read(root, lc, &resolved);  // (its only complaint: no sources, which a run gives)
  return config_to_string(toml::table{{"model", model_config_to_toml(c)}, {"data", resolved}});
}

// ---- --check: the SMTN tensor files hf_family.py reads and writes (format in tests/reference/llama_ref.py) ----

Status write_tokens_smtn(const std::string& path, const std::vector<int32_t>& ids) {
  std::string b = "SMTN";
  auto u32 = [&](uint32_t v) { b.append((const char*)&v, 4); };
  auto i64 = [&](int64_t v) { b.append((const char*)&v, 8); };
  u32(1);
  u32(1);
  const std::string name = "tokens";
  u32((uint32_t)name.size());
  b += name;
  b += char(1);  // int32
  b += char(2);  // (B, T)
  i64(1);
  i64((int64_t)ids.size());
  b.append((const char*)ids.data(), 4 * ids.size());
  return files_write_atomic(path, b);
}

// The float32 tensor `want` of an SMTN file, with its dims.
Status read_smtn_f32(const std::string& path, const std::string& want, std::vector<float>& out,
                     std::vector<int64_t>& dims) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  uint32_t version = 0, count = 0;
  f.read(magic, 4);
  f.read((char*)&version, 4);
  f.read((char*)&count, 4);
  if (!f || std::memcmp(magic, "SMTN", 4) != 0 || version != 1)
    return Status::error(fmt::format("{}: not an SMTN version 1 file", path));
  for (uint32_t k = 0; k < count; k++) {
    uint32_t n = 0;
    f.read((char*)&n, 4);
    std::string name(n, '\0');
    f.read(name.data(), n);
    uint8_t dtype = 0, ndim = 0;
    f.read((char*)&dtype, 1);
    f.read((char*)&ndim, 1);
    std::vector<int64_t> d(ndim);
    f.read((char*)d.data(), 8 * ndim);
    int64_t numel = 1;
    for (int64_t x : d) numel *= x;
    if (!f || numel < 0) return Status::error(fmt::format("{}: tensor {}: truncated header", path, name));
    if (name == want && dtype == 0) {
      out.resize((size_t)numel);
      f.read((char*)out.data(), 4 * numel);
      if (!f) return Status::error(fmt::format("{}: tensor {}: truncated data", path, name));
      dims = d;
      return Status::ok();
    }
    f.seekg(4 * numel, std::ios::cur);
  }
  return Status::error(fmt::format("{}: no float32 tensor {}", path, want));
}

// hf_family.py: $SMELT_REFERENCE_DIR, else beside the source tree the binary was built in.
Status find_reference(std::string& script, std::vector<std::string>& tried) {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("SMELT_REFERENCE_DIR"); env && *env) dirs.emplace_back(env);
  const fs::path exe_dir = fs::path(cli_self_exe()).parent_path();
  dirs.push_back(exe_dir / ".." / "tests" / "reference");
  dirs.push_back(exe_dir / ".." / ".." / "tests" / "reference");
  std::error_code ec;
  for (const auto& d : dirs) {
    const fs::path p = (d / "hf_family.py").lexically_normal();
    tried.push_back(p.string());
    if (fs::exists(p, ec)) {
      script = p.string();
      return Status::ok();
    }
  }
  return Status::error(fmt::format("--check: the reference tests/reference/hf_family.py is missing (looked for {}); "
                                   "set SMELT_REFERENCE_DIR to the source tree's tests/reference",
                                   fmt::join(tried, ", ")));
}

struct CheckText {
  std::string name, text;
};

struct CheckResult {
  std::string name;
  int tokens = 0;
  LogprobDiff d;     // Smelt's fp32 forward against the reference
  LogprobDiff bf16;  // Smelt's bf16 forward (the linear layers' GEMMs in bf16, as training runs them)
};

// The check's token sequences: each text's first kCheckTokens tokens (after BOS where the
// tokenizer config names one and does not turn it off: Llama, Mistral; not Qwen).
Status check_token_ids(const HfImportResult& imp, int max_seq_len, const std::vector<CheckText>& texts,
                       std::vector<std::vector<int32_t>>& out) {
  Tokenizer tok;
  if (Status s = Tokenizer::load(imp.tokenizer_path, tok); !s) return s;
  const json& st = imp.import_state;
  const bool add_bos = st["bos_token"].is_string() && st["add_bos_token"] != json(false) &&
                       st["bos_token_id"].is_number_integer();
  for (const auto& t : texts) {
    std::vector<uint32_t> raw;
    tok.encode(t.text, raw, false);
    std::vector<int32_t> ids;
    if (add_bos) ids.push_back(st["bos_token_id"].get<int32_t>());
    for (uint32_t id : raw) ids.push_back((int32_t)id);
    ids.resize(std::min<size_t>(ids.size(), (size_t)std::min(kCheckTokens, max_seq_len)));
    if (ids.size() < 2) return Status::error(fmt::format("--check: text {} gives {} tokens; it needs 2", t.name, ids.size()));
    out.push_back(std::move(ids));
  }
  return Status::ok();
}

// The reference's (T, V) log-probabilities of ids: hf_family.py logprobs on the source folder, run
// in a scratch folder of its own.
Status reference_logprobs(const std::string& python, const std::string& script, const std::string& hf_dir,
                          const fs::path& work, const std::string& name, const std::vector<int32_t>& ids, int64_t V,
                          std::vector<float>& ref) {
  const std::string in = (work / "in.smtn").string(), out = (work / "out.smtn").string();
  const std::string err = (work / "stderr.txt").string();
  if (Status s = write_tokens_smtn(in, ids); !s) return s;
  const std::string cmd = fmt::format("{} {} logprobs {} {} {} > {} 2>&1", python, shell_quote(script),
                                      shell_quote(hf_dir), shell_quote(in), shell_quote(out), shell_quote(err));
  if (std::system(cmd.c_str()) != 0) {
    std::string msg;
    (void)files_read_small(err, msg);
    if (msg.size() > 2000) msg = "..." + msg.substr(msg.size() - 2000);
    return Status::error(fmt::format("--check: the reference failed on text {}: {}\n{}", name, cmd, msg));
  }
  std::vector<int64_t> dims;
  if (Status s = read_smtn_f32(out, "logprobs", ref, dims); !s) return s;
  const int64_t T = (int64_t)ids.size();
  if (dims != std::vector<int64_t>{1, T, V})
    return Status::error(fmt::format("--check: {}: logprobs has dims [{}], expected [1, {}, {}]", out,
                                     fmt::join(dims, ", "), T, V));
  return Status::ok();
}

// The imported checkpoint's log-probabilities of each sequence under `precision`, compared with
// the reference's into (fp32 ? d : bf16) of each result.
Status compare_ours(const std::string& step_dir, Precision precision, int threads,
                    const std::vector<std::vector<int32_t>>& ids, const std::vector<std::vector<float>>& refs,
                    std::vector<CheckResult>& results) {
  ModelConfig c;
  std::vector<float> params;
  if (Status s = ckpt_load_model(step_dir, c, params); !s) return s;
  Model model;
  if (Status s = import_model_init(model, c, std::move(params), kCheckTokens, threads, precision); !s) return s;
  std::vector<float> ours;
  for (size_t i = 0; i < ids.size(); i++) {
    if (Status s = import_logprobs(model, ids[i], ours); !s) return s;
    const LogprobDiff d = import_compare_logprobs(refs[i].data(), ours.data(), (int64_t)ids[i].size(), c.vocab_size,
                                                  ids[i]);
    (precision == Precision::kFp32 ? results[i].d : results[i].bf16) = d;
  }
  return Status::ok();
}

// Runs the imported checkpoint in fp32 and in bf16 and the reference on each text; fails when a
// text's fp32 log-probs differ beyond LogprobDiff::tolerance() or its bf16 mean KL exceeds
// kImportBf16MeanKl.
Status run_check(const HfImportResult& imp, const std::string& hf_dir, const std::vector<CheckText>& texts,
                 int threads, std::vector<CheckResult>& results) {
  const char* python = "/usr/bin/python3";
  if (::access(python, X_OK) != 0)
    return Status::error(fmt::format("--check: {} is missing (the reference forward runs in Debian's python3 with "
                                     "python3-torch; apt-get install python3-torch)", python));
  std::string script;
  std::vector<std::string> tried;
  if (Status s = find_reference(script, tried); !s) return s;
  if (std::system(fmt::format("{} -c 'import torch' > /dev/null 2>&1", python).c_str()) != 0)
    return Status::error(fmt::format("--check: PyTorch is missing: `{} -c 'import torch'` fails (apt-get install "
                                     "python3-torch)", python));
  const ModelConfig& c = imp.info.config;
  std::vector<std::vector<int32_t>> ids;
  if (Status s = check_token_ids(imp, c.max_seq_len, texts, ids); !s) return s;

  const fs::path work = fs::temp_directory_path() / fmt::format("smelt-import-check-{}", ::getpid());
  std::error_code ec;
  fs::create_directories(work, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create: {}", work.string(), ec.message()));
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(p, e);
    }
  } cleanup{work};
  std::vector<std::vector<float>> refs(texts.size());
  for (size_t i = 0; i < texts.size(); i++) {
    if (Status s = reference_logprobs(python, script, hf_dir, work, texts[i].name, ids[i], c.vocab_size, refs[i]); !s)
      return s;
    results.push_back({texts[i].name, (int)ids[i].size(), {}, {}});
  }
  for (Precision p : {Precision::kFp32, Precision::kBf16})
    if (Status s = compare_ours(imp.step_dir, p, threads, ids, refs, results); !s) return s;
  for (const auto& r : results) {
    if (!r.d.passed())
      return Status::error(fmt::format("--check: text {}: next-token log-probabilities differ from the PyTorch "
                                       "reference by up to {:.3g} (tolerance {:.3g} = 1e-4 x max(1, max |ref "
                                       "logprob| = {:.3g})){}; the checkpoint is kept in {} for inspection",
                                       r.name, r.d.max_abs, r.d.tolerance(), r.d.ref_max_abs,
                                       r.d.nan ? ", NaN values" : "", imp.step_dir));
    if (r.bf16.nan || !(r.bf16.mean_kl <= kImportBf16MeanKl))
      return Status::error(fmt::format("--check: text {}: in bf16 the mean KL from the PyTorch reference is {:.3g} "
                                       "nats (tolerance {:.3g}){}, while fp32 agrees; the checkpoint is kept in {}",
                                       r.name, r.bf16.mean_kl, kImportBf16MeanKl, r.bf16.nan ? ", NaN values" : "",
                                       imp.step_dir));
  }
  return Status::ok();
}

// --gguf FILE: import_gguf into the run (docs/import.md "GGUF"), with the same resolved config.
int run_gguf_import(const std::string& gguf, const std::string& output, int max_seq_len, bool force, bool json_out) {
  const auto t0 = std::chrono::steady_clock::now();
  GgufImportOptions o;
  o.gguf_path = gguf;
  o.run_dir = output;
  o.max_seq_len = max_seq_len;
  o.force = force;
  o.config_toml = import_config_toml;
  GgufImportResult r;
  if (Status s = import_gguf(o, r); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& x : r.removed) spdlog::info("--force: removed {}", x);
  std::string types;
  for (const auto& [t, n] : r.info.types) types += fmt::format("{}{} {}", types.empty() ? "" : ", ", t, n);
  std::fputs(fmt::format("[import] {} ({}) -> {}: {:.2f}M params in {} tensors ({}), max_seq_len {} (context_length "
                         "{}), RoPE {}, tokenizer.ggml.pre {}, {:.2f} s, peak RSS {:.0f} MiB\n",
                         gguf, r.info.architecture, r.step_dir, r.params / 1e6, param_layout(r.config).tensors.size(),
                         types, r.config.max_seq_len, r.info.context_length, r.info.rope, r.info.pre, secs,
                         peak_rss_bytes() / 1048576.0)
                 .c_str(),
             stderr);
  if (json_out)
    std::fputs((json{{"source", gguf}, {"output", output}, {"checkpoint", r.step_dir},
                     {"architecture", r.info.architecture}, {"params", r.params}, {"tensor_types", r.info.types},
                     {"max_seq_len", r.config.max_seq_len}, {"context_length", r.info.context_length},
                     {"rope", r.info.rope}, {"pre", r.info.pre}, {"removed", r.removed}, {"seconds", secs},
                     {"peak_rss_bytes", peak_rss_bytes()}}
                    .dump() +
                "\n")
                   .c_str(),
               stdout);
  return kExitOk;
}

}  // namespace

int cli_import(int argc, char** argv) {
  CLI::App app{"smelt import: a Hugging Face checkpoint folder (LlamaForCausalLM, MistralForCausalLM, "
               "Qwen2ForCausalLM, Qwen3ForCausalLM; safetensors in F32, F16 or BF16) or a GGUF file (llama, qwen2; "
               "F32/F16/BF16/Q8_0) -> step 0 of a Smelt run (docs/import.md)"};
  app.name("smelt import");
  std::string hf, gguf, output, tok_path;
  std::vector<std::string> check_files;
  int max_seq_len = 4096, threads = 0;
  bool check = false, json_out = false, force = false;
  auto* hf_opt = app.add_option("--hf", hf, "the Hugging Face folder: config.json, model.safetensors (or "
                                "model.safetensors.index.json and its shards), tokenizer.json (this or --gguf)");
  app.add_option("--gguf", gguf, "a GGUF file of llama.cpp's llama or qwen2 architecture (F32/F16/BF16/Q8_0 "
                 "tensors, byte-level BPE tokenizer; docs/import.md \"GGUF\")")->excludes(hf_opt);
  app.add_option("-o,--output", output, "the run folder; the checkpoint goes to RUN/checkpoints/step_00000000 "
                 "(required)")->required();
  app.add_option("--max-seq-len", max_seq_len, "longest context: min(max_position_embeddings, this) sizes the RoPE "
                 "table and the serving caches (default 4096)")->check(CLI::Range(2, 1 << 20));
  app.add_option("--tokenizer", tok_path, "tokenizer.json to use instead of the folder's (byte-level BPE)");
  app.add_flag("--force", force, "replace the checkpoints already in RUN/checkpoints (once the import is committed)");
  app.add_flag("--check", check, "run the imported model on an English and a Chinese text beside the PyTorch "
               "reference tests/reference/hf_family.py on the source folder; exit 1 when log-probabilities differ "
               "by more than 1e-4 x max(1, max |ref logprob|)");
  app.add_option("--check-text", check_files, "--check on this text file instead (repeatable; the first 64 tokens "
                 "of each)");
  app.add_option("--threads", threads, "--check: threads of the forward (0 = every core)")->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json_out, "print a JSON summary on stdout");
  if (int rc = cli_parse(app, argc, argv, "import"); rc >= 0) return rc;
  if (hf.empty() == gguf.empty()) {
    spdlog::error("smelt import: give --hf DIR or --gguf FILE");
    return kExitUsage;
  }
  if (!gguf.empty()) {
    if (check || !check_files.empty() || !tok_path.empty()) {
      spdlog::error("--gguf: {} is for --hf (the file carries its tokenizer; the reference reads HF folders)",
                    !tok_path.empty() ? "--tokenizer" : "--check");
      return kExitUsage;
    }
    return run_gguf_import(gguf, output, max_seq_len, force, json_out);
  }
  std::vector<CheckText> texts;
  if (!check_files.empty()) {
    check = true;
    for (const auto& p : check_files) {
      CheckText t{fs::path(p).filename().string(), ""};
      if (Status s = files_read_small(p, t.text); !s) {
        spdlog::error("--check-text {}: {}", p, s.message());
        return kExitUsage;
      }
      texts.push_back(std::move(t));
    }
  } else {
    texts = {{"english", kCheckEnglish}, {"chinese", kCheckChinese}};
  }
  std::error_code ec;
  if (!fs::is_directory(hf, ec)) {
    spdlog::error("--hf {}: not a folder", hf);
    return kExitFailure;
  }

  const auto t0 = std::chrono::steady_clock::now();
  HfImportOptions o;
  o.hf_dir = hf;
  o.run_dir = output;
  o.max_seq_len = max_seq_len;
  o.tokenizer_path = tok_path;
  o.force = force;
  o.config_toml = import_config_toml;
  HfImportResult r;
  if (Status s = import_hf(o, r); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t import_rss = peak_rss_bytes();  // before --check loads the model whole
  const ModelConfig& c = r.info.config;
  spdlog::info("max_seq_len {}: min(max_position_embeddings {}, --max-seq-len {}); it sizes the RoPE table and the "
               "serving caches", c.max_seq_len, r.info.max_position_embeddings, max_seq_len);
  for (const auto& x : r.weights.ignored) spdlog::info("ignored {}", x);
  for (const auto& x : r.removed) spdlog::info("--force: removed {}", x);

  std::vector<CheckResult> results;
  Status checked = Status::ok();
  if (check) checked = run_check(r, hf, texts, threads, results);
  const std::string check_state = !check ? "not run" : checked ? "passed" : "failed";

  std::string dtypes, check_text;
  for (const auto& [d, n] : r.weights.dtypes) dtypes += fmt::format("{}{} {}", dtypes.empty() ? "" : ", ", d, n);
  for (const auto& x : results)
    check_text += fmt::format("; {} ({} tokens): max |Δ logprob| {:.3g} (tolerance {:.3g}), mean KL {:.3g}; bf16: "
                              "mean KL {:.3g} (tolerance {:.3g}), max |Δ logprob| {:.3g}", x.name, x.tokens,
                              x.d.max_abs, x.d.tolerance(), x.d.mean_kl, x.bf16.mean_kl, kImportBf16MeanKl,
                              x.bf16.max_abs);
  const int64_t rss = peak_rss_bytes();
  std::fputs(fmt::format("[import] {} ({}) -> {}: {:.2f}M params in {} tensors ({}), {} file{}, max_seq_len {}, "
                         "{:.2f} s, peak RSS {:.0f} MiB (import), {:.0f} MiB (with the check); check {}{}\n",
                         hf, r.info.architecture, r.step_dir, r.params / 1e6, r.weights.tensors, dtypes,
                         r.weights.shards, r.weights.shards == 1 ? "" : "s", c.max_seq_len, secs,
                         import_rss / 1048576.0, rss / 1048576.0, check_state, check_text)
                 .c_str(),
             stderr);
  if (json_out) {
    json checks = json::array();
    for (const auto& x : results)
      checks.push_back({{"text", x.name}, {"tokens", x.tokens}, {"max_abs_logprob_diff", x.d.max_abs},
                        {"max_abs_ref_logprob", x.d.ref_max_abs}, {"tolerance", x.d.tolerance()},
                        {"mean_kl", x.d.mean_kl}, {"ref_nll", x.d.ref_nll}, {"nll", x.d.our_nll},
                        {"passed", x.d.passed()},
                        {"bf16", {{"mean_kl", x.bf16.mean_kl}, {"kl_tolerance", kImportBf16MeanKl},
                                  {"max_abs_logprob_diff", x.bf16.max_abs}, {"nll", x.bf16.our_nll},
                                  {"passed", !x.bf16.nan && x.bf16.mean_kl <= kImportBf16MeanKl}}}});
    json j = {{"source", hf},
              {"output", output},
              {"checkpoint", r.step_dir},
              {"architecture", r.info.architecture},
              {"params", r.params},
              {"tensors", r.weights.tensors},
              {"shards", r.weights.shards},
              {"dtypes", r.weights.dtypes},
              {"dtype_bytes", r.weights.dtype_bytes},
              {"source_bytes", r.weights.source_bytes},
              {"ignored", r.weights.ignored},
              {"removed", r.removed},
              {"max_seq_len", c.max_seq_len},
              {"max_position_embeddings", r.info.max_position_embeddings},
              {"seconds", secs},
              {"peak_rss_bytes", rss},
              {"import_peak_rss_bytes", import_rss},
              {"check", check_state},
              {"check_texts", checks}};
    std::fputs((j.dump() + "\n").c_str(), stdout);
  }
  if (!checked) {
    spdlog::error("{}", checked.message());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace smelt
