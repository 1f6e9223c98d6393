// Speed of prep's reference scorer (perplexity/ref_scorer.hpp) against the trainer's forward on the
// same model in the same run: documents/s and tokens/s of bits_per_byte over real text (one caller,
// one context), for f32 and the "auto" weights, beside Model::forward_loss tokens/s (rows of
// max_seq_len), and the ratio. The model is random-init from --config's [model] with a byte-level
// tokenizer (one token per byte), saved as a run in a temp folder. Not a test: it asserts nothing.
// Usage: ref_scorer_bench [--config configs/demo.toml] [--threads N] [--seconds S] [--batch-rows R] [FILE...]
//   each FILE is cut into documents at blank lines, paragraphs joined up to >= 400 bytes
//   (default: tests/data/tokenizer_train/*.rst, run from the repository root).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/hw/cpu_info.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/model.hpp"
#include "smelt/model/params.hpp"
#include "smelt/perplexity/ref_scorer.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

using namespace smelt;
namespace fs = std::filesystem;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Documents of at least 400 bytes: paragraphs (blank-line separated) joined in order.
std::vector<std::string> read_docs(const std::vector<std::string>& files) {
  std::vector<std::string> docs;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string t = ss.str();
    std::string cur;
    for (size_t at = 0; at < t.size();) {
      size_t end = t.find("\n\n", at);
      if (end == std::string::npos) end = t.size();
      cur += t.substr(at, end - at) + "\n";
      at = end + 2;
      if (cur.size() >= 400) docs.push_back(std::move(cur)), cur.clear();
    }
    if (!cur.empty()) docs.push_back(cur);
  }
  return docs;
}

// A byte-level tokenizer: the 256 bytes and <|endoftext|> (256), no merges.
Status byte_tokenizer(const std::string& path, Tokenizer& tok) {
  BpeModel m;
  for (int b = 0; b < 256; b++) m.vocab.push_back(std::string(1, (char)b));
  m.specials.push_back({"<|endoftext|>", 256, true});
  if (Status s = Tokenizer::from_model(m, tok); !s) return s;
  return tok.save_hf(path);
}

// The random model as step 1 of run, with the tokenizer.
Status save_run(const ModelConfig& c, const float* params, const std::string& run, const std::string& tok) {
  CkptSaveRequest r;
  r.step = 1;
  std::ostringstream os;
  os << toml::table{{"model", model_config_to_toml(c)}};
  r.config_toml = os.str();
  r.tokenizer_path = tok;
  r.state = nlohmann::json::object();
  for (const auto& t : param_layout(c).tensors)
    r.tensors.push_back({t.name, t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.rows, t.cols},
                         params + t.offset});
  return ckpt_save(run, r);
}

// The trainer's forward (loss only) on rows of max_seq_len: target tokens per second.
double forward_tokens_per_s(Model& m, int B, int T, double seconds) {
  Batch b;
  b.B = B, b.T = T;
  b.inputs.resize((size_t)B * T);
  b.targets.resize((size_t)B * T);
  for (size_t i = 0; i < b.inputs.size(); i++) {
    b.inputs[i] = (int32_t)((i * 7919) % 256);
    b.targets[i] = (int32_t)((i * 7919 + 7) % 256);
  }
  float loss = 0;
  (void)m.forward_loss(b, loss);  // warm-up
  int64_t tokens = 0;
  const double t0 = now_s();
  while (now_s() - t0 < seconds) {
    if (Status s = m.forward_loss(b, loss); !s) return 0;
    tokens += (int64_t)B * T;
  }
  return (double)tokens / (now_s() - t0);
}

struct ScoreRate {
  double docs_per_s = 0, tokens_per_s = 0, mean_bpb = 0;
};

ScoreRate score_rate(ReferenceScorer& s, const Tokenizer& tok, const std::vector<std::string>& docs, double seconds) {
  ScoreRate r;
  (void)s.bits_per_byte(docs[0]);  // warm-up
  int64_t n = 0, tokens = 0;
  double sum = 0;
  std::vector<uint32_t> ids;
  const double t0 = now_s();
  while (now_s() - t0 < seconds) {
    const std::string& d = docs[n % docs.size()];
    sum += s.bits_per_byte(d);
    ids.clear();
    tok.encode(d, ids, false);
    tokens += (int64_t)ids.size();
    n++;
  }
  const double dt = now_s() - t0;
  r.docs_per_s = (double)n / dt;
  r.tokens_per_s = (double)tokens / dt;
  r.mean_bpb = sum / (double)n;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config = "configs/demo.toml";
  int threads = 1, batch_rows = 8;
  double seconds = 3;
  std::vector<std::string> files;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--config") && i + 1 < argc) config = argv[++i];
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--batch-rows") && i + 1 < argc) batch_rows = std::atoi(argv[++i]);
    else files.push_back(argv[i]);
  }
  if (files.empty())
    files = {"tests/data/tokenizer_train/en_coding_style.rst", "tests/data/tokenizer_train/zh_coding_style.rst"};
  const std::vector<std::string> docs = read_docs(files);
  ModelConfig mc;
  try {
    if (Status s = model_config_read(toml::parse_file(config), mc); !s) {
      std::fprintf(stderr, "ref_scorer_bench: %s: %s\n", config.c_str(), s.message().c_str());
      return 1;
    }
  } catch (const toml::parse_error& e) {
    std::fprintf(stderr, "ref_scorer_bench: %s: %s\n", config.c_str(), std::string(e.description()).c_str());
    return 1;
  }
  if (docs.empty()) {
    std::fprintf(stderr, "ref_scorer_bench: no documents in the given files\n");
    return 1;
  }
  const fs::path dir = fs::temp_directory_path() / ("ref_scorer_bench_" + std::to_string(getpid()));
  fs::create_directories(dir);
  Tokenizer tok;
  Model m;
  const int B = 8, T = mc.max_seq_len;
  Status s = byte_tokenizer((dir / "tokenizer.json").string(), tok);
  if (s) s = m.init(mc, B, T, threads, 1);
  if (s) s = save_run(mc, m.params(), (dir / "run").string(), (dir / "tokenizer.json").string());
  if (!s) {
    std::fprintf(stderr, "ref_scorer_bench: %s\n", s.message().c_str());
    return 1;
  }
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  std::printf("ref_scorer_bench: %s, %s [model] (%.1fM parameters, max_seq_len %d), %zu documents of %.0f bytes on "
              "average, byte tokens, %d thread(s)\n", cpu_info().model.c_str(), config.c_str(),
              (double)param_layout(mc).total / 1e6, T, docs.size(), (double)bytes / docs.size(), threads);
  const double fwd = forward_tokens_per_s(m, B, T, seconds);
  std::printf("  trainer forward_loss (%d x %d rows, fp32): %.0f tokens/s\n", B, T, fwd);
  for (const char* w : {"f32", "auto"}) {
    RefScorerOptions o;
    o.checkpoint = (dir / "run").string();
    o.weights = w;
    o.threads = threads;
    o.batch_rows = batch_rows;
    std::unique_ptr<ReferenceScorer> sc;
    if (Status e = make_ref_scorer(o, sc); !e) {
      std::fprintf(stderr, "ref_scorer_bench: %s\n", e.message().c_str());
      return 1;
    }
    const ScoreRate r = score_rate(*sc, tok, docs, seconds);
    std::printf("  scorer %-4s: %.1f documents/s, %.0f tokens/s = %.2fx the forward (mean %.3f bits per byte)\n    %s\n",
                w, r.docs_per_s, r.tokens_per_s, r.tokens_per_s / fwd, r.mean_bpb, sc->describe().c_str());
  }
  fs::remove_all(dir);
  return 0;
}
