// `smelt train`, `smelt eval` and `smelt pipeline` as a user runs them, as real processes: SIGTERM
// finishes the step, saves and exits 0, and --resume then reproduces the uninterrupted run's
// metrics; eval reproduces the trainer's validation loss; exit codes and messages for bad configs
// and models that do not fit; a whole pipeline on the test texts, from raw text to a sample.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/dataset/indexed.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

struct CmdRun {
  int rc = -1;
  std::string out, err;
};

CmdRun run(const std::string& args, const fs::path& dir) {
  const std::string out = (dir / "cmd.out").string(), err = (dir / "cmd.err").string();
  int st = std::system((std::string(SMELT_BINARY) + " " + args + " > " + out + " 2> " + err).c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, test::read_file(out), test::read_file(err)};
}

std::vector<json> metrics(const fs::path& run_dir) { return test::read_metrics(run_dir); }

class TrainCmdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("smelt_train_cmd");
    const std::string en = std::string(SMELT_TEST_DATA) + "/tokenizer/english.txt";
    test::write_byte_shard((dir_ / "train").string(), {en});
    test::write_byte_shard((dir_ / "valid").string(), {std::string(SMELT_TEST_DATA) + "/tokenizer_train/en_coding_style.rst"});
    test::write_file((dir_ / "run.toml").string(), test::byte_model_toml(32, true) + R"([data]
seq_len = 32
batch_size = 2
eod_id = 256
[train]
steps = 300
threads = 1
peak_gflops = 50
[optim]
lr = 3e-3
warmup_steps = 10
[eval]
every = 100
tokens = 1024
[ckpt]
save_every = 100
)");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string base(const std::string& run_dir) {
    return fmt::format("train --config {} --data {} --set eval.data=\\\"{}\\\" --run-dir {}", (dir_ / "run.toml").string(),
                       (dir_ / "train").string(), (dir_ / "valid").string(), (dir_ / run_dir).string());
  }
  fs::path dir_;
};

TEST_F(TrainCmdTest, SigtermSavesAndResumeMatchesTheUninterruptedRun) {
  CmdRun full = run(base("full"), dir_);
  ASSERT_EQ(full.rc, 0) << full.err;
  const auto want = metrics(dir_ / "full");
  ASSERT_EQ(want.size(), 301u);

  // Start, let it run some steps, SIGTERM between two checkpoints.
  const std::string cmd = std::string(SMELT_BINARY) + " " + base("cut") + " 2> " + (dir_ / "cut.err").string();
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), (char*)nullptr);
    _exit(127);
  }
  const fs::path m = dir_ / "cut" / "metrics.jsonl";
  // Just past the step-100 checkpoint: the whole run takes well under a second, so the signal
  // goes out as early as the test allows (at 130 lines a loaded machine let the run finish first).
  for (int i = 0; i < 30000; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::ifstream in(m);
    if (in && std::count(std::istreambuf_iterator<char>(in), {}, '\n') > 102) break;
  }
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << "ended by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0) << ": "
                             << test::read_file((dir_ / "cut.err").string());
  EXPECT_EQ(WEXITSTATUS(st), 0) << test::read_file((dir_ / "cut.err").string());
  auto cut = metrics(dir_ / "cut");
  ASSERT_GE(cut.size(), 2u);
  const int64_t stopped = cut.back()["step"];
  ASSERT_LT(stopped, 300) << "the run finished before the signal";
  // The signal's checkpoint is the newest, at the last step written, and it verifies.
  std::string latest;
  ASSERT_TRUE(ckpt_find_latest((dir_ / "cut").string(), latest).is_ok());
  EXPECT_EQ(fs::path(latest).filename().string(), fmt::format("step_{:08d}", stopped));
  EXPECT_NE(test::read_file((dir_ / "cut.err").string()).find("stopped by a signal"), std::string::npos);

  CmdRun res = run(base("cut") + " --resume", dir_);
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_NE(res.err.find(fmt::format("resuming from {}", latest)), std::string::npos) << res.err;
  auto got = metrics(dir_ / "cut");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); i++) EXPECT_EQ(got[i].dump(), want[i].dump()) << "line " << i;

  // smelt eval on the final checkpoint gives the trainer's last validation loss.
  CmdRun ev = run(fmt::format("eval --checkpoint {} --data {} --max-tokens 1024", (dir_ / "full").string(),
                           (dir_ / "valid").string()),
               dir_);
  ASSERT_EQ(ev.rc, 0) << ev.err;
  json e = json::parse(ev.out);
  EXPECT_EQ(e["step"], 300);
  EXPECT_EQ(e["tokens"], 1024);
  EXPECT_NEAR(e["loss"].get<double>(), want.back()["eval_loss"].get<double>(), 1e-9);
  EXPECT_NEAR(e["perplexity"].get<double>(), std::exp(e["loss"].get<double>()), 1e-9);
  EXPECT_LT(want.back()["eval_loss"].get<double>(), want.front()["eval_loss"].get<double>() - 1.0);
}

// smelt eval --dtype q8_0 (implies --kl-vs f32): int8 weights and activations move the trained
// byte model's next-token distributions by a small KL and keep nearly every argmax; the q8_0 loss
// is near the f32 one, and the f32 side is what the training forward computes.
TEST_F(TrainCmdTest, EvalQ8_0AgainstF32ReportsKlAndGreedyAgreement) {
  CmdRun full = run(base("full"), dir_);
  ASSERT_EQ(full.rc, 0) << full.err;
  CmdRun ev = run(fmt::format("eval --checkpoint {} --data {} --max-tokens 1024 --dtype q8_0 --threads 2",
                              (dir_ / "full").string(), (dir_ / "valid").string()),
                  dir_);
  ASSERT_EQ(ev.rc, 0) << ev.err;
  json e = json::parse(ev.out);
  EXPECT_EQ(e["dtype"], "q8_0");
  EXPECT_EQ(e["kl_vs"], "f32");
  EXPECT_EQ(e["tokens"], 1024);
  const double kl = e["mean_kl"], agree = e["greedy_agreement"];
  EXPECT_GT(kl, 0.0) << "q8_0 and f32 gave the same distributions: is q8_0 used?";
  EXPECT_LT(kl, 0.01);
  EXPECT_GT(agree, 0.9);
  EXPECT_LE(agree, 1.0);
  EXPECT_NEAR(e["loss"].get<double>(), e["ref_loss"].get<double>(), 0.05);
  // The reference is f32 decoding of the same rows, each document alone: the training forward of
  // `smelt eval --dtype f32` on the same tokens agrees to fp32 noise.
  CmdRun f32 = run(fmt::format("eval --checkpoint {} --data {} --max-tokens 1024 --dtype f32",
                               (dir_ / "full").string(), (dir_ / "valid").string()),
                   dir_);
  ASSERT_EQ(f32.rc, 0) << f32.err;
  EXPECT_NEAR(e["ref_loss"].get<double>(), json::parse(f32.out)["loss"].get<double>(), 1e-6);
  EXPECT_NE(ev.err.find("greedy agreement"), std::string::npos) << ev.err;
  CmdRun bad = run(fmt::format("eval --checkpoint {} --data {} --kl-vs q4", (dir_ / "full").string(),
                               (dir_ / "valid").string()),
                   dir_);
  EXPECT_EQ(bad.rc, 2) << bad.err;
}

TEST_F(TrainCmdTest, ExitCodesAndMessages) {
  CmdRun r = run(base("x") + " --set train.stepz=3", dir_);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("stepz"), std::string::npos) << r.err;
  r = run(base("x") + " --set optim.lr=-1", dir_);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("[optim] lr = -1"), std::string::npos) << r.err;
  r = run("train --config " + (dir_ / "run.toml").string() + " --data " + (dir_ / "missing").string() +
              " --run-dir " + (dir_ / "x").string(),
          dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("missing"), std::string::npos) << r.err;
  // A model that does not fit the memory budget is refused before training, with the numbers.
  r = run(base("x") + " --set train.memory_mb=1", dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("activations"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("MiB"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "x" / "metrics.jsonl"));
  r = run("train --config " + std::string(SMELT_SOURCE_DIR) + "/configs/model-7b.toml --data x --dry-run "
          "--set train.memory_mb=16384 --set data.seq_len=256 --set data.eod_id=0", dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("the memory plan needs"), std::string::npos) << r.err;
  // --dry-run plans the run's precision: bf16 adds the weights' bf16 copy and the GEMM operands.
  for (const char* p : {"fp32", "bf16"}) {
    r = run(base("x") + " --dry-run --set train.precision=" + p, dir_);
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find(fmt::format("({}):", p)), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("bf16 operands") != std::string::npos, std::string(p) == "bf16") << r.out;
  }
  r = run(base("x") + " --print-config", dir_);
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("[optim]"), std::string::npos);
  EXPECT_NE(r.out.find("warmup_steps = 10"), std::string::npos) << r.out;
  EXPECT_EQ(run("train --bogus", dir_).rc, 2);
  EXPECT_EQ(run("eval --checkpoint " + (dir_ / "nothing").string() + " --data x", dir_).rc, 1);
}

// [tokenize] language_weights is checked before any stage runs: a usage error naming the key.
// [train] memory_ceiling_mb: a rank past it stops after the step (or inside an evaluation) with
// exit 1 and a message that starts with its rank and host (`smelt launch` reads them) and carries
// the measurement and the plan's rows; a ceiling above the run's need lets it finish. The run's own summary holds the plan
// beside the peak: the plan, its end's save included, within 16 MiB of the peak (what it does not
// count: the BLAS's packing buffers, thread stacks, small heap objects).
TEST_F(TrainCmdTest, MemoryCeilingStopsTheRankWithThePlanBesideIt) {
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  CmdRun r = run(base("ceiling") + " --steps 3 --set train.memory_ceiling_mb=1", dir_);
  EXPECT_EQ(r.rc, 1) << r.err;
  const std::string head = fmt::format("memory ceiling: rank 0 (host {}): ", host);
  const size_t at = r.err.find(head);
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string msg = r.err.substr(at, r.err.find('\n', at) - at);
  EXPECT_NE(msg.find("MiB resident after step 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("memory_ceiling_mb = 1;"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the plan: run total"), std::string::npos) << msg;
  EXPECT_NE(msg.find("process"), std::string::npos) << msg;
  EXPECT_EQ(metrics(dir_ / "ceiling").back()["step"], 1);  // stopped at its first check
  // Inside an evaluation (from step 1 on), after its first batch.
  r = run(base("ceiling-eval") + " --steps 3 --set eval.every=1 --set train.memory_ceiling_mb=1", dir_);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find(head), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("MiB resident during the evaluation at step 1 "), std::string::npos) << r.err;

  r = run(base("roomy") + " --steps 3 --set train.memory_ceiling_mb=4096", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("memory ceiling"), std::string::npos) << r.err;
  const json sum = json::parse(test::read_file((dir_ / "roomy" / "summary.json").string()));
  const json& m = sum["memory_per_rank"][0];
  const double planned = m["planned_bytes"], peak = m["peak_rss_bytes"];
  EXPECT_GT(m["process_bytes"].get<double>(), 1 << 20);
  EXPECT_GT(planned, peak - (16 << 20)) << "planned " << planned << " peak " << peak;
  EXPECT_LT(planned, peak * 1.5) << "planned " << planned << " peak " << peak;
}

TEST_F(TrainCmdTest, PipelineRefusesBadLanguageWeights) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"language_weights = 1", "expected a table of language = weight"},
      {"language_weights = { en = 1, zh = 0 }", "language_weights.zh: expected a number > 0"},
      {"language_weights = { en = \"a lot\" }", "language_weights.en: expected a number > 0"},
      {"language_weights = { \"e,n\" = 1 }", "\"e,n\" is not a language code"},
      {"language_weights = {}", "language_weights is empty"}};
  for (const auto& [line, message] : bad) {
    test::write_file((dir_ / "pipe.toml").string(), fmt::format("[pipeline]\ninputs = [\"x\"]\nworkdir = \"{}\"\n"
                                                                "[tokenize]\n{}\n", (dir_ / "work").string(), line));
    CmdRun r = run("pipeline " + (dir_ / "pipe.toml").string(), dir_);
    EXPECT_EQ(r.rc, 2) << line << "\n" << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << line << "\n" << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "work" / "refined")) << "no stage ran";
  }
}

TEST_F(TrainCmdTest, PipelineFromRawTextToASample) {
  const std::string d = SMELT_TEST_DATA;
  test::write_file((dir_ / "pipe.toml").string(), fmt::format(R"(
[pipeline]
inputs = ["{}/tokenizer_train", "{}/tokenizer/english.txt", "{}/tokenizer/chinese.txt"]
workdir = "{}"
[prep.read]
text_unit = "paragraph"
[prep.sample]
threshold = 0.0
[tokenizer]
vocab_size = 600
[tokenize]
holdout = 0.1
[model]
vocab_size = 600
d_model = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
ffn_hidden = 176
max_seq_len = 64
[data]
seq_len = 64
batch_size = 4
[train]
steps = 40
peak_gflops = 50
[optim]
lr = 1e-2
warmup_steps = 5
[eval]
every = 20
tokens = 1000000
[generate]
prompts = ["The", "我们"]
max_new_tokens = 12
)", d, d, d, (dir_ / "work").string()));
  CmdRun r = run("pipeline " + (dir_ / "pipe.toml").string() + " --threads 2", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const fs::path w = dir_ / "work";
  for (const char* f : {"refined/stats.json", "tokenizer.json", "tokens.bin", "tokens.idx", "valid.idx",
                        "run/metrics.jsonl", "run/summary.json", "sample.txt", "pipeline.json", "pipeline.toml"})
    EXPECT_TRUE(fs::exists(w / f)) << f;
  json j = json::parse(test::read_file((w / "pipeline.json").string()));
  for (const char* s : {"prep", "tokenizer", "tokenize", "tokenize_holdout", "train", "eval", "generate"})
    EXPECT_EQ(j["stages"][s]["exit_code"], 0) << s;
  EXPECT_EQ(j["artifacts"]["tokens"], (w / "tokens").string());  // one shard, without language_weights
  ASSERT_EQ(j["token_shards"].size(), 1u);
  EXPECT_EQ(j["token_shards"][0]["tokens"], json::parse(test::read_file((w / "tokens.stats.json").string()))["tokens"]);
  EXPECT_TRUE(j["train_loss_by_source"].empty());
  EXPECT_LT(j["train"]["eval_last"].get<double>(), j["train"]["eval_first"].get<double>());
  EXPECT_LT(j["train"]["eval_last_bpb"].get<double>(), j["train"]["eval_first_bpb"].get<double>());
  // Bits per byte: the eval stage scores the final checkpoint on the whole held-out set, the same
  // number the trainer's last evaluation gave, over the bytes `smelt tokenize` counted in those
  // documents (each end of document one byte; the very first token is only an input).
  const json& ev = j["eval"];
  EXPECT_NEAR(ev["bits_per_byte"].get<double>(), j["train"]["eval_last_bpb"].get<double>(), 1e-9);
  EXPECT_NEAR(ev["bits_per_byte"].get<double>() * ev["bytes"].get<double>() * std::log(2.0),
              ev["loss"].get<double>() * ev["tokens"].get<double>(), 1e-6 * ev["loss"].get<double>() * ev["tokens"].get<double>());
  json vs = json::parse(test::read_file((w / "valid.stats.json").string()));
  uint64_t text_bytes = 0;
  for (auto& [lang, v] : vs["languages"].items()) text_bytes += v["text_bytes"].get<uint64_t>();
  const uint64_t held_out = text_bytes + vs["documents"].get<uint64_t>(), scored = ev["bytes"].get<uint64_t>();
  EXPECT_LT(scored, held_out);
  EXPECT_GE(scored + 32, held_out) << "all but the first token's bytes";
  ASSERT_EQ(ev["compressors"].size(), 3u);
  for (const auto& c : ev["compressors"]) {
    EXPECT_EQ(c["bytes_in"].get<uint64_t>(), scored) << c.dump();
    EXPECT_GT(c["bits_per_byte"].get<double>(), 0.5) << c.dump();
    EXPECT_LT(c["bits_per_byte"].get<double>(), 8.5) << c.dump();
  }
  EXPECT_EQ(ev["compressors"][2]["command"], "xz -9e -c");
  EXPECT_EQ(ev["compressors"][2]["label"], "xz -9e");
  // Greedy and sampled continuations of each prompt, in the summary and sample.txt.
  ASSERT_EQ(j["samples"].size(), 4u);
  EXPECT_EQ(j["samples"][0]["prompt"], "The");
  EXPECT_EQ(j["samples"][0]["mode"], "greedy");
  EXPECT_EQ(j["samples"][3]["prompt"], "我们");
  EXPECT_EQ(j["samples"][3]["mode"], "sampled");
  const std::string sample_txt = test::read_file((w / "sample.txt").string());
  EXPECT_NE(sample_txt.find("=== 我们 (greedy) ==="), std::string::npos) << sample_txt;
  // A 40-step model may end a continuation at once (its first token the end of a document: the
  // GEMM back end and the CPU's vector width decide which), so not every sample has text; but
  // the model generates, and the summary prints every sample.
  size_t with_text = 0;
  for (const auto& smp : j["samples"]) {
    with_text += !smp["text"].get<std::string>().empty();
    EXPECT_NE(r.err.find(smp["text"].get<std::string>()), std::string::npos) << "the summary prints every sample";
  }
  EXPECT_GE(with_text, 2u) << j["samples"].dump();
  EXPECT_NE(r.err.find("validation     loss"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bits per byte on the same text"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("loss (nats per token)"), std::string::npos) << r.err;  // the chart
  EXPECT_NE(r.err.find("o validation loss"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("MFU"), std::string::npos) << r.err;
  // Streaming mode: the refined text tokenized on the fly instead of the token shards.
  r = run(fmt::format("train --config {}/pipeline.toml --data \"{}/refined/part-*.jsonl.zst\" --run-dir {}/stream --steps 6 "
                      "--set data.stream_tokenizer=\\\"{}/tokenizer.json\\\" --set train.tokenizer=\\\"{}/tokenizer.json\\\" "
                      "--set eval.data=\\\"{}/valid\\\" --set eval.tokens=2048 --set data.append_eod=true",
                      w.string(), w.string(), w.string(), w.string(), w.string(), w.string()),
          dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto sm = metrics(w / "stream");
  ASSERT_EQ(sm.size(), 7u);  // the evaluation before training + 6 steps
  EXPECT_TRUE(sm[6]["loss_by_source"].contains("stream"));
  EXPECT_LT(sm[6]["eval_loss"].get<double>(), sm[0]["eval_loss"].get<double>());
  // A bad stage name is a usage error naming the allowed ones.
  r = run("pipeline " + (dir_ / "pipe.toml").string() + " --set pipeline.stages=[\\\"trian\\\"]", dir_);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("allowed: prep, tokenizer"), std::string::npos) << r.err;
}

// A full disk: the run folder on a 2.6 MB tmpfs (mounted in a user+mount namespace) holds the first
// checkpoint (1.5 MB) but not a second. With [ckpt] on_error = "stop" the run exits 1 naming the
// file and ENOSPC; with "continue" it trains to the end and logs the failed saves as events. Either
// way the first checkpoint stays valid and `latest` names it.
TEST_F(TrainCmdTest, DiskFullStopsOrContinuesAsConfigured) {
  if (std::system("unshare --user --map-root-user --mount true 2>/dev/null") != 0)
    GTEST_SKIP() << "user namespaces are not allowed here (the checkpoint layer's disk-full test covers ENOSPC/EFBIG)";
  const fs::path mnt = dir_ / "mnt";  // one small tmpfs per run
  fs::create_directories(mnt / "stop");
  fs::create_directories(mnt / "cont");
  const std::string smelt = SMELT_BINARY;
  auto train = [&](const std::string& run, const std::string& on_error) {
    return fmt::format("{} train --config {} --data {} --run-dir {}/{} --steps 8 "
                       "--save-every 2 --set ckpt.keep_last=1 --set ckpt.on_error=\\\"{}\\\" --set model.tie_embeddings=false "
                       "> {}/{}.log 2>&1; echo {}_rc=$?",
                       smelt, (dir_ / "run.toml").string(), (dir_ / "train").string(), mnt.string(), run, on_error,
                       dir_.string(), run, run);
  };
  const std::string script = fmt::format(
      "mount -t tmpfs -o size=2600k tmpfs {m}/stop || exit 3; mount -t tmpfs -o size=2600k tmpfs {m}/cont || exit 3; "
      "{a}; {b}; "
      "{s} ckpt verify {m}/stop/checkpoints/step_00000002 > /dev/null 2>&1; echo verify_stop=$?; "
      "{s} ckpt verify {m}/cont/checkpoints/step_00000002 > /dev/null 2>&1; echo verify_cont=$?; "
      "cat {m}/stop/checkpoints/latest; echo; cat {m}/cont/checkpoints/latest; echo; "
      "cp {m}/cont/metrics.jsonl {d}/cont.metrics",
      fmt::arg("m", mnt.string()), fmt::arg("a", train("stop", "stop")), fmt::arg("b", train("cont", "continue")),
      fmt::arg("s", smelt), fmt::arg("d", dir_.string()));
  test::write_file((dir_ / "script.sh").string(), script + "\n");
  const std::string log = (dir_ / "script.log").string();
  int st = std::system(("unshare --user --map-root-user --mount sh " + (dir_ / "script.sh").string() + " > " + log +
                        " 2>&1").c_str());
  const std::string out = test::read_file(log);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  EXPECT_NE(out.find("stop_rc=1"), std::string::npos) << out;
  EXPECT_NE(out.find("cont_rc=0"), std::string::npos) << out;
  EXPECT_NE(out.find("verify_stop=0"), std::string::npos) << out;
  EXPECT_NE(out.find("verify_cont=0"), std::string::npos) << out;
  const size_t first = out.find("step_00000002");  // both `latest` files still name the first checkpoint
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_NE(out.find("step_00000002", first + 1), std::string::npos) << out;
  const std::string stop_log = test::read_file((dir_ / "stop.log").string());
  EXPECT_NE(stop_log.find("No space left on device"), std::string::npos) << stop_log;
  EXPECT_NE(stop_log.find("checkpoint at step"), std::string::npos) << stop_log;
  // The continuing run trained every step and recorded each failed save.
  std::istringstream in(test::read_file((dir_ / "cont.metrics").string()));
  std::string line;
  int failed = 0, last_step = 0;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    if (j.value("event", "") == "checkpoint_failed") {
      failed++;
      EXPECT_NE(j["error"].get<std::string>().find("No space left on device"), std::string::npos) << line;
    } else if (!j.contains("event")) {
      last_step = j["step"];
    }
  }
  EXPECT_EQ(last_step, 8);
  EXPECT_GE(failed, 1);
}

}  // namespace

