// `smelt import` end to end (cli/import_cmd.cpp): a Qwen3 folder written by the independent
// tests/reference/hf_family.py (2 shards, QK-norm, head_dim twice hidden/heads) is imported with
// --check --json (log-probabilities beside hf_family.py's float64 forward, in fp32 and in bf16,
// printed); an 80-layer folder is imported holding one tensor at a time (peak RSS); the imported
// run then works with `smelt generate` (its greedy tokens are the reference's argmax at every step),
// `smelt serve` (the same greedy text), `smelt eval` and `smelt export --format hf --check`.
// Usage errors exit 2, bad input 1 with the file named; --check fails, saying what, when the
// reference is missing or disagrees.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/tiny_checkpoint.hpp"
#include "serve/raw_http.hpp"
#include "serve/serve_process.hpp"
#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/ckpt/import_hf.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "smtn.hpp"
#include "test_references.hpp"
#include "tokenizer/tok_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

const char* kPython = "/usr/bin/python3";
std::string ref_dir() { return std::string(SMELT_SOURCE_DIR) + "/tests/reference"; }
std::string hf_family_py() { return ref_dir() + "/hf_family.py"; }

bool references_present() {
  return ::access(kPython, X_OK) == 0 &&
         std::system((std::string(kPython) + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0 &&
         fs::exists(hf_family_py()) && test::refs_installed();
}

int sh(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

class ImportCmd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("smelt_import_cmd_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    if (!references_present()) return;
    hf_ = (dir_ / "qwen3").string();
    written_ = sh(fmt::format("{} {} write {} --family qwen3 --dtype fp32 --shards 2 --seed 3 --tokenizer {}", kPython,
                              hf_family_py(), hf_, test::fixtures() + "/qwen2.json")) == 0;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    SMELT_REQUIRE_REFERENCE(references_present(),
                            "python3-torch for /usr/bin/python3, tests/reference/hf_family.py and the npm references "
                            "(fixture tokenizers): scripts/install-deps");
    ASSERT_TRUE(written_) << "hf_family.py write failed";
  }
  static test::CmdResult smelt(const std::string& args) { return test::run_smelt(args, dir_); }

  static inline fs::path dir_;
  static inline std::string hf_;
  static inline bool written_ = false;
};

}  // namespace

TEST_F(ImportCmd, ImportsWithCheckThenGenerateServeEvalAndExportWork) {
  const std::string run = (dir_ / "run").string();
  test::CmdResult r = smelt(fmt::format("import --hf {} --output {} --check --json", hf_, run));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::printf("%s", r.err.substr(r.err.find("[import]")).c_str());
  const json j = json::parse(r.out);
  EXPECT_EQ(j["architecture"], "Qwen3ForCausalLM");
  EXPECT_EQ(j["shards"], 2);
  EXPECT_EQ(j["dtypes"]["F32"], j["tensors"]);
  EXPECT_EQ(j["check"], "passed");
  EXPECT_EQ(j["max_seq_len"], 4096);  // min(max_position_embeddings 40960, --max-seq-len 4096)
  EXPECT_GT(j["peak_rss_bytes"].get<int64_t>(), 0);
  ASSERT_EQ(j["check_texts"].size(), 2u);
  for (const auto& t : j["check_texts"]) {
    std::printf("[import --check] %s: %d tokens, max |Δ logprob| %.3g (tolerance %.3g), mean KL %.3g, NLL ref %.4f "
                "smelt %.4f\n",
                t["text"].get<std::string>().c_str(), t["tokens"].get<int>(), t["max_abs_logprob_diff"].get<double>(),
                t["tolerance"].get<double>(), t["mean_kl"].get<double>(), t["ref_nll"].get<double>(),
                t["nll"].get<double>());
    EXPECT_LT(t["max_abs_logprob_diff"].get<double>(), 1e-4);
    EXPECT_GE(t["tokens"].get<int>(), 32);
    // bf16: Smelt's training numerics (bf16 GEMM inputs) against the same reference, a stated KL.
    const json& b = t["bf16"];
    std::printf("[import --check] %s bf16: mean KL %.3g (tolerance %.3g), max |Δ logprob| %.3g, NLL %.4f\n",
                t["text"].get<std::string>().c_str(), b["mean_kl"].get<double>(), b["kl_tolerance"].get<double>(),
                b["max_abs_logprob_diff"].get<double>(), b["nll"].get<double>());
    EXPECT_TRUE(b["passed"].get<bool>()) << b.dump();
    EXPECT_LE(b["mean_kl"].get<double>(), b["kl_tolerance"].get<double>());
    EXPECT_GT(b["max_abs_logprob_diff"].get<double>(), t["max_abs_logprob_diff"].get<double>())
        << "the bf16 forward rounds: it is further from the reference than fp32";
  }
  EXPECT_NE(r.err.find("check passed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sizes the RoPE table"), std::string::npos) << r.err;

  // generate, greedy: every token is the reference's argmax after the prompt and the tokens before it.
  const std::string prompt = "The quick brown fox";
  r = smelt(fmt::format("generate --checkpoint {} --prompt '{}' --temperature 0 --max-new-tokens 6 --ignore-eos --json",
                        run, prompt));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json g = json::parse(r.out);
  std::vector<int32_t> gen = g["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(gen.size(), 6u);
  Tokenizer tok;
  ASSERT_TRUE(Tokenizer::load(run + "/checkpoints/step_00000000/tokenizer.json", tok));
  std::vector<uint32_t> p32;
  tok.encode(prompt, p32);
  test::Tensor in;
  in.i.assign(p32.begin(), p32.end());
  in.i.insert(in.i.end(), gen.begin(), gen.end());
  in.dims = {1, (int64_t)in.i.size()};
  const std::string in_path = (dir_ / "gen_in.smtn").string(), out_path = (dir_ / "gen_out.smtn").string();
  test::write_smtn(in_path, {{"tokens", in}});
  ASSERT_EQ(sh(fmt::format("{} {} logprobs {} {} {}", kPython, hf_family_py(), hf_, in_path, out_path)), 0);
  test::TensorMap ref = test::read_smtn(out_path);
  const int64_t V = ref["logits"].dims[2];
  for (size_t k = 0; k < gen.size(); k++) {
    const float* row = ref["logits"].f.data() + (int64_t)(p32.size() - 1 + k) * V;
    const int64_t best = std::max_element(row, row + V) - row;
    float second = -INFINITY;
    for (int64_t v = 0; v < V; v++)
      if (v != best) second = std::max(second, row[v]);
    if (row[best] - second > 1e-3) {  // (a near tie may go either way)
      EXPECT_EQ(gen[k], best) << "new token " << k;
    }
  }

  // serve: the same greedy continuation over HTTP.
  {
    test::ServeProcess srv("--checkpoint " + run, dir_ / "serve.log");
    ASSERT_GT(srv.port(), 0) << srv.log();
    test::Reply rep = test::http(srv.port(), "POST", "/v1/completions",
                                 json{{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}}.dump());
    ASSERT_EQ(rep.status, 200) << rep.body;
    EXPECT_EQ(rep.js()["choices"][0]["text"], g["text"]) << rep.body;
    EXPECT_EQ(srv.stop(), 0) << srv.log();
  }

  // eval: held-out loss on a token shard of real text.
  {
    std::vector<uint32_t> ids;
    tok.encode(test::read_file("/usr/share/common-licenses/GPL-3").substr(0, 6000), ids, false);
    IndexedWriter w;
    const std::string prefix = (dir_ / "heldout").string();
    ASSERT_TRUE(w.open(prefix, IndexedDType::kInt32));
    ASSERT_TRUE(w.add_document(ids));
    ASSERT_TRUE(w.finish());
    r = smelt(fmt::format("eval --checkpoint {} --data {} --max-tokens 512 --threads 2", run, prefix));
    ASSERT_EQ(r.rc, 0) << r.err;
    const json e = json::parse(r.out);
    EXPECT_TRUE(std::isfinite(e["loss"].get<double>())) << r.out;
    EXPECT_GT(e["tokens"].get<int64_t>(), 0) << r.out;
  }

  // export back to Hugging Face, checked.
  r = smelt(fmt::format("export --checkpoint {} --format hf -o {} --check", run, (dir_ / "export").string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(test::read_file((dir_ / "export" / "config.json").string()))["architectures"][0],
            "Qwen3ForCausalLM");

  // Again into the same run: refused without --force (exit 1, naming the folder), replaced with it.
  r = smelt(fmt::format("import --hf {} --output {}", hf_, run));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(run + "/checkpoints: not empty"), std::string::npos) << r.err;
  r = smelt(fmt::format("import --hf {} --output {} --force --max-seq-len 128 --json", hf_, run));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["max_seq_len"], 128);
  EXPECT_EQ(json::parse(r.out)["check"], "not run");
}

// The import streams the weights into the checkpoint: it holds one tensor at a time (as fp32),
// not the model. An 80-layer Mistral-shaped folder (bf16) whose fp32 model is ~6x its largest
// tensor imports in less memory than half the fp32 model, and the checkpoint holds its values.
TEST_F(ImportCmd, TheImportHoldsOneTensorAtATimeNotTheWholeModel) {
  const std::string hf = (dir_ / "deep").string(), run = (dir_ / "deep_run").string();
  ASSERT_EQ(sh(fmt::format("{} {} write {} --family mistral --dtype bf16 --seed 4 --layers 80 --tokenizer {} > {} 2>&1",
                           kPython, hf_family_py(), hf, test::fixtures() + "/gpt2.json", (dir_ / "deep.log").string())),
            0) << test::read_file((dir_ / "deep.log").string());
  test::CmdResult r = smelt(fmt::format("import --hf {} --output {} --json", hf, run));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  const json cfg = json::parse(test::read_file(hf + "/config.json"));
  const double fp32 = 4.0 * j["params"].get<double>();
  const double largest = 4.0 * cfg["vocab_size"].get<double>() * cfg["hidden_size"].get<double>();
  const double rss = j["import_peak_rss_bytes"].get<double>();
  std::printf("[import] %lld layers: the model %.0f MiB in fp32, its largest tensor %.0f MiB; the import's peak RSS "
              "%.0f MiB\n", (long long)cfg["num_hidden_layers"].get<int64_t>(), fp32 / 1048576, largest / 1048576,
              rss / 1048576);
  EXPECT_GT(fp32, 4 * largest);
  EXPECT_LT(rss, fp32 / 2) << "the import holds more than a tensor at a time";
  HfModelInfo info;
  ASSERT_TRUE(import_hf_config(hf, 4096, info).is_ok());
  std::vector<float> want, got;
  ASSERT_TRUE(import_hf_weights(hf, info.config, want).is_ok());
  ModelConfig c;
  ASSERT_TRUE(ckpt_load_model(j["checkpoint"].get<std::string>(), c, got).is_ok());
  EXPECT_TRUE(got == want) << "the checkpoint holds the folder's values";
  fs::remove_all(hf);
  fs::remove_all(run);
}

TEST_F(ImportCmd, UsageErrorsExitTwoAndBadInputExitsOneNamingTheFile) {
  const std::string out = (dir_ / "usage").string();
  EXPECT_EQ(smelt("import").rc, 2);
  EXPECT_EQ(smelt("import --hf " + hf_).rc, 2);                        // no --output
  EXPECT_EQ(smelt("import --output " + out).rc, 2);                    // no --hf
  EXPECT_EQ(smelt("import --hf " + hf_ + " --output " + out + " --max-seq-len 0").rc, 2);
  EXPECT_EQ(smelt("import --hf " + hf_ + " --output " + out + " --no-such-flag").rc, 2);
  test::CmdResult r = smelt("import --hf " + hf_ + " --output " + out + " --check-text " + (dir_ / "nope.txt").string());
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("nope.txt"), std::string::npos) << r.err;
  r = smelt("import --hf " + (dir_ / "missing").string() + " --output " + out);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("missing"), std::string::npos) << r.err;
  // A folder of another architecture: the file, the architecture and the field.
  fs::path bad = dir_ / "gpt2";
  fs::create_directories(bad);
  fs::copy(hf_, bad, fs::copy_options::overwrite_existing | fs::copy_options::recursive);
  json cfg = json::parse(test::read_file((bad / "config.json").string()));
  cfg["architectures"] = {"GPT2LMHeadModel"};
  test::write_file((bad / "config.json").string(), cfg.dump());
  r = smelt("import --hf " + bad.string() + " --output " + out);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find((bad / "config.json").string() + ": architectures = [\"GPT2LMHeadModel\"]"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(ImportCmd, CheckFailsSayingWhatWhenTheReferenceIsMissingOrDisagrees) {
  // A copy of the binaries where no tests/reference lies beside them, and no SMELT_REFERENCE_DIR.
  fs::path bin = dir_ / "elsewhere" / "bin";
  fs::create_directories(bin);
  fs::copy_file(SMELT_FULL_BINARY, bin / "smelt-full", fs::copy_options::overwrite_existing);
  const std::string run = (dir_ / "check_run").string();
  const std::string cmd = fmt::format("env -u SMELT_REFERENCE_DIR {} import --hf {} --output {} --check", (bin / "smelt-full").string(),
                                      hf_, run);
  int rc = sh(cmd + " > " + (dir_ / "o.txt").string() + " 2> " + (dir_ / "e.txt").string());
  std::string err = test::read_file((dir_ / "e.txt").string());
  EXPECT_EQ(rc, 1) << err;
  EXPECT_NE(err.find("hf_family.py is missing"), std::string::npos) << err;
  EXPECT_NE(err.find("SMELT_REFERENCE_DIR"), std::string::npos) << err;

  // A reference that disagrees by 0.05 at one entry (a genuine mismatch's size; fp32 rounding here
  // is ~2e-5): the check fails with the numbers.
  fs::path fake = dir_ / "fake_reference";
  fs::create_directories(fake);
  test::write_file((fake / "hf_family.py").string(),
                   fmt::format("import subprocess, sys\n"
                               "sys.path.insert(0, '{0}')\n"
                               "from llama_ref import read_tensors, write_tensors\n"
                               "subprocess.run(['{1}', '{0}/hf_family.py'] + sys.argv[1:], check=True)\n"
                               "t = read_tensors(sys.argv[4])\n"
                               "t['logprobs'][0, 5, 7] += 0.05\n"
                               "write_tensors(sys.argv[4], t)\n",
                               ref_dir(), kPython));
  rc = sh(fmt::format("SMELT_REFERENCE_DIR={} {} import --hf {} --output {} --force --check --json > {} 2> {}",
                      fake.string(), SMELT_BINARY, hf_, run, (dir_ / "o.txt").string(), (dir_ / "e.txt").string()));
  err = test::read_file((dir_ / "e.txt").string());
  EXPECT_EQ(rc, 1) << err;
  EXPECT_NE(err.find("differ from the PyTorch reference by up to 0.05"), std::string::npos) << err;
  const json j = json::parse(test::read_file((dir_ / "o.txt").string()));
  EXPECT_EQ(j["check"], "failed");
}
