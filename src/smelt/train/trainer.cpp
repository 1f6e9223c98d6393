// The training loop (trainer.hpp): one process, one model, a prefetching loader; each step is
// accumulate -> clip -> AdamW, then metrics, evaluation and checkpoints as configured.
#include "smelt/train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/common/config.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/dataset/blend.hpp"
#include "smelt/dataset/indexed.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace smelt {

namespace {

std::atomic<bool> g_stop{false};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The batch source: token shards (Loader) or refined text tokenized on the fly (StreamLoader).
struct Feed {
  Loader shards;
  StreamLoader stream;
  bool streaming = false;
  std::vector<std::string> names;  // [source index in Batch::sources]

  Status open(const LoaderConfig& c, const LoaderPosition* pos) {
    streaming = !c.stream_tokenizer.empty();
    if (streaming) {
      names = {"stream"};
      return stream.open(c, pos);
    }
    if (Status s = shards.open(c, pos); !s) return s;
    for (const auto& d : shards.sources()) names.push_back(d.name);
    return Status::ok();
  }
  const Batch& next() { return streaming ? stream.next() : shards.next(); }
  LoaderPosition position() const { return streaming ? stream.position() : shards.position(); }
  double last_wait_ms() const { return streaming ? stream.last_wait_ms() : shards.last_wait_ms(); }
  const LatencyWindow& latency() const { return streaming ? stream.fetch_latency() : shards.fetch_latency(); }
};

}  // namespace

void train_batch_shape(const LoaderConfig& d, int& B, int& T) {
  if (d.mode == "packed") {
    B = std::max(1, d.batch_size / std::max(1, d.ranks));
    T = d.seq_len;
    return;
  }
  T = d.buckets.back();
  const int64_t tokens = (int64_t)d.max_tokens_per_batch / std::max(1, d.ranks);
  B = (int)std::max<int64_t>(1, (tokens + T - 1) / T);
}

namespace {

std::vector<int64_t> shape_of(const ParamTensor& t) {
  return t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.rows, t.cols};
}

// Keeps the metrics lines of steps <= step (a resume continues the file where the checkpoint was).
Status truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return Status::ok();
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step")) break;  // a torn last line from a kill
    if (j["step"].get<int64_t>() > step) break;
    kept += line + "\n";
  }
  return files_write_atomic(path, kept);
}

std::string human_count(double x) {
  if (x >= 1e9) return fmt::format("{:.2f}B", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.0f}", x);
}

std::string duration_str(double s) {
  if (s < 0 || !std::isfinite(s)) return "?";
  int64_t t = (int64_t)s;
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (int)(t % 3600 / 60));
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, (int)(t % 60));
  return fmt::format("{}s", t);
}

}  // namespace

void train_request_stop() { g_stop = true; }

double train_flops_per_token(const ModelConfig& c, int T) {
  const double C = c.d_model, H = c.ffn_hidden, QKV = c.qkv_size(), A = c.n_heads * c.head_size();
  const double per_layer = C * QKV + A * C + C * 2 * H + H * C;
  const double matmul_params = c.n_layers * per_layer + (double)c.vocab_size * C;
  return 6.0 * matmul_params + 12.0 * c.n_layers * C * T;
}

double measure_sgemm_gflops(int threads, int n) {
  kernels_set_threads(threads);
  std::vector<float> a((size_t)n * n), w((size_t)n * n), o((size_t)n * n);
  for (size_t i = 0; i < a.size(); i++) {
    a[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    w[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
  }
  matmul_forward(o.data(), a.data(), w.data(), n, n, n, 0.0f);  // warm up
  double best = 1e30;
  for (int r = 0; r < 3; r++) {
    double t0 = now_s();
    matmul_forward(o.data(), a.data(), w.data(), n, n, n, 0.0f);
    best = std::min(best, now_s() - t0);
  }
  return 2.0 * n * n * (double)n / best / 1e9;
}

Status evaluate(Model& m, const LoaderConfig& base, const std::string& sources, int64_t max_tokens, EvalResult& r) {
  r = EvalResult{};
  LoaderConfig e = base;
  e.sources = sources;
  e.mode = "packed";
  e.shuffle = false;
  e.prefetch_threads = 0;
  e.stream_tokenizer.clear();
  int B, T;
  train_batch_shape(base, B, T);
  e.seq_len = std::min(T, m.config().max_seq_len);
  e.batch_size = std::max(1, B) * std::max(1, e.ranks);
  // Never read past one pass over the held-out tokens.
  std::vector<DataSource> src;
  if (Status s = blend_parse_sources(sources, src); !s) return Status::error("[eval] data: " + s.message());
  uint64_t available = 0;
  for (const auto& d : src) {
    IndexedDataset ds;
    if (Status s = ds.open(d.prefix); !s) return Status::error("[eval] data: " + s.message());
    available += ds.tokens() + (e.append_eod ? ds.sequences() : 0);
  }
  const uint64_t limit = std::min<uint64_t>((uint64_t)max_tokens, available);
  Loader loader;
  if (Status s = loader.open(e); !s) return Status::error("[eval] " + s.message());
  double sum = 0.0;
  while (r.tokens < limit) {
    const Batch& b = loader.next();
    float loss = 0;
    if (Status s = m.forward(b, loss); !s) return s;
    const float* losses = m.token_losses();
    const int N = b.B * b.T;
    for (int n = 0; n < N && r.tokens < limit; n++)
      if (b.targets[n] >= 0) {
        sum += losses[n];
        r.tokens++;
      }
    r.batches++;
  }
  if (r.tokens == 0) return Status::error(fmt::format("[eval] {}: no tokens to evaluate", sources));
  r.loss = sum / (double)r.tokens;
  r.perplexity = std::exp(r.loss);
  return Status::ok();
}

namespace {

class Trainer {
 public:
  explicit Trainer(const TrainConfig& c) : c_(c) {}
  Status run(TrainSummary& out);

 private:
  Status setup();
  Status resume_from_checkpoint();
  Status save(int64_t step, const char* why);
  Status eval_now(int64_t step, ojson* line);
  void status_line(int64_t step, double loss, double tok_s, double mfu, double wait_ms, bool final);
  json state_json() const;

  TrainConfig c_;
  Model model_;
  Feed feed_;
  std::unique_ptr<Tokenizer> tok_;
  std::string run_dir_, metrics_path_, config_text_;
  std::ofstream metrics_;
  int threads_ = 1, B_ = 1, T_ = 1;
  int64_t step_ = 0, start_step_ = 0, total_steps_ = 0;
  uint64_t tokens_ = 0;
  double prev_grad_norm_ = 0, peak_gflops_ = 0;
  double first_loss_ = NAN, last_loss_ = NAN, eval_first_ = -1, eval_last_ = -1;
  LoaderPosition loader_pos_;
  bool have_resume_pos_ = false;
  std::string last_ckpt_;
  bool tty_ = false;
  double last_status_s_ = 0, run_start_s_ = 0;
  double sum_step_ms_ = 0, sum_wait_ms_ = 0;
  uint64_t tokens_this_run_ = 0;
};

Status Trainer::setup() {
  threads_ = c_.train.threads > 0 ? c_.train.threads : (int)std::max(1u, std::thread::hardware_concurrency());
  run_dir_ = c_.train.run_dir;
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create the run folder: {}", run_dir_, ec.message()));
  metrics_path_ = (fs::path(run_dir_) / "metrics.jsonl").string();

  if (!c_.train.tokenizer.empty()) {
    tok_ = std::make_unique<Tokenizer>();
    if (Status s = Tokenizer::load(c_.train.tokenizer, *tok_); !s)
      return Status::error("[train] tokenizer: " + s.message());
    if ((int64_t)tok_->vocab_size() > c_.model.vocab_size)
      return Status::error(fmt::format("[train] tokenizer {} has {} tokens but [model] vocab_size = {}: raise "
                                       "vocab_size to at least {}", c_.train.tokenizer, tok_->vocab_size(),
                                       c_.model.vocab_size, tok_->vocab_size()));
    if (c_.data.eod_id < 0 && tok_->eod_id()) c_.data.eod_id = *tok_->eod_id();
  }
  if (Status s = loader_config_validate(c_.data); !s) return s;
  // (Token ids >= vocab_size are refused by Model::forward, naming the position.)
  train_batch_shape(c_.data, B_, T_);
  const int64_t budget = c_.train.memory_mb > 0 ? c_.train.memory_mb << 20 : memory_physical_bytes();
  if (Status s = model_.init(c_.model, B_, T_, threads_, c_.train.seed, budget); !s) return s;
  // Steps: the configured count, or what max_tokens needs at full batches.
  const int64_t tokens_per_step = (int64_t)B_ * T_ * c_.train.grad_accum;
  total_steps_ = c_.train.steps > 0 ? c_.train.steps
                                    : (c_.train.max_tokens + tokens_per_step - 1) / tokens_per_step;
  c_.schedule.total_steps = total_steps_;
  config_text_ = train_config_to_string(c_);
  if (Status s = files_write_atomic((fs::path(run_dir_) / "config.toml").string(), config_text_); !s) return s;
  return Status::ok();
}

json Trainer::state_json() const {
  json s;
  s["step"] = step_;
  s["tokens"] = tokens_;
  s["optimizer_step"] = model_.step();
  s["prev_grad_norm"] = prev_grad_norm_;
  s["loader"] = loader_pos_.to_json();
  s["schedule"] = {{"kind", c_.schedule.kind},     {"lr", c_.schedule.lr},
                   {"min_lr", c_.schedule.min_lr}, {"warmup_steps", c_.schedule.warmup_steps},
                   {"total_steps", total_steps_},  {"restart_step", c_.schedule.restart_step}};
  s["first_loss"] = std::isfinite(first_loss_) ? json(first_loss_) : json(nullptr);
  s["last_loss"] = std::isfinite(last_loss_) ? json(last_loss_) : json(nullptr);
  s["eval_first"] = eval_first_;
  s["eval_last"] = eval_last_;
  return s;
}

Status Trainer::resume_from_checkpoint() {
  std::string dir;
  std::vector<std::string> warnings;
  Status found = ckpt_find_latest(run_dir_, dir, &warnings);
  for (const auto& w : warnings) spdlog::warn("{}", w);
  if (!found) {
    spdlog::info("--resume: no valid checkpoint in {} ({}); starting from step 0", run_dir_, found.message());
    return Status::ok();
  }
  CkptManifest m;
  if (Status s = ckpt_read_manifest(dir, m); !s) return s;
  toml::table root;
  try {
    root = toml::parse(m.config_toml);
  } catch (const toml::parse_error& e) {
    return Status::error(fmt::format("{}: the stored config does not parse: {}", dir, e.description()));
  }
  ModelConfig saved;
  if (Status s = model_config_read(root, saved); !s) return Status::error(fmt::format("{}: {}", dir, s.message()));
  saved.recompute = c_.model.recompute;  // recomputation changes memory, not the model
  if (config_to_string(toml::table{{"model", model_config_to_toml(saved)}}) !=
      config_to_string(toml::table{{"model", model_config_to_toml(c_.model)}}))
    return Status::error(fmt::format("{}: the checkpoint's [model] differs from this run's; resume with the same "
                                     "[model] section (stored in {}/config.toml)", dir, dir));
  const ParamLayout& lay = model_.layout();
  for (const auto& t : lay.tensors) {
    if (Status s = ckpt_load_tensor(dir, m, t.name, model_.params() + t.offset, t.size()); !s) return s;
    if (Status s = ckpt_load_tensor(dir, m, "optim.m." + t.name, model_.adam_m() + t.offset, t.size()); !s) return s;
    if (Status s = ckpt_load_tensor(dir, m, "optim.v." + t.name, model_.adam_v() + t.offset, t.size()); !s) return s;
  }
  const json& st = m.state;
  try {
    step_ = st.at("step").get<int64_t>();
    tokens_ = st.at("tokens").get<uint64_t>();
    model_.set_step(st.at("optimizer_step").get<int64_t>());
    prev_grad_norm_ = st.at("prev_grad_norm").get<double>();
    if (!st.at("first_loss").is_null()) first_loss_ = st["first_loss"].get<double>();
    if (!st.at("last_loss").is_null()) last_loss_ = st["last_loss"].get<double>();
    eval_first_ = st.value("eval_first", -1.0);
    eval_last_ = st.value("eval_last", -1.0);
    c_.schedule.restart_step = st.at("schedule").value("restart_step", (int64_t)-1);
    if (Status s = LoaderPosition::from_json(st.at("loader"), loader_pos_); !s)
      return Status::error(fmt::format("{}: loader position: {}", dir, s.message()));
  } catch (const std::exception& e) {
    return Status::error(fmt::format("{}/manifest.json: trainer state: {}", dir, e.what()));
  }
  have_resume_pos_ = true;
  start_step_ = step_;
  last_ckpt_ = dir;
  spdlog::info("resuming from {} (step {}, {} tokens)", dir, step_, human_count((double)tokens_));
  return truncate_metrics(metrics_path_, step_);
}

Status Trainer::save(int64_t step, const char* why) {
  CkptSaveRequest r;
  r.step = step;
  r.config_toml = config_text_;
  r.tokenizer_path = c_.train.tokenizer;
  r.state = state_json();
  const ParamLayout& lay = model_.layout();
  for (const auto& t : lay.tensors) r.tensors.push_back({t.name, shape_of(t), model_.params() + t.offset});
  for (const auto& t : lay.tensors) r.tensors.push_back({"optim.m." + t.name, shape_of(t), model_.adam_m() + t.offset});
  for (const auto& t : lay.tensors) r.tensors.push_back({"optim.v." + t.name, shape_of(t), model_.adam_v() + t.offset});
  CkptSaveStats st;
  if (Status s = ckpt_save(run_dir_, r, &st); !s) return Status::error(fmt::format("checkpoint at step {}: {}", step, s.message()));
  last_ckpt_ = st.dir;
  spdlog::info("checkpoint ({}) {}: {:.1f} MB in {:.0f} ms ({:.0f} MB/s)", why, st.dir, st.bytes / 1e6, st.stall_ms,
               st.write_mb_s);
  std::vector<std::string> removed;
  if (Status s = ckpt_retain(run_dir_, c_.ckpt.keep_last, c_.ckpt.keep_every, &removed); !s)
    spdlog::warn("checkpoint retention: {}", s.message());
  return Status::ok();
}

Status Trainer::eval_now(int64_t step, ojson* line) {
  EvalResult r;
  double t0 = now_s();
  if (Status s = evaluate(model_, c_.data, c_.eval.data, c_.eval.tokens, r); !s) return s;
  if (eval_first_ < 0) eval_first_ = r.loss;
  eval_last_ = r.loss;
  if (line) {
    (*line)["eval_loss"] = r.loss;
    (*line)["eval_ppl"] = r.perplexity;
    (*line)["eval_tokens"] = r.tokens;
  }
  spdlog::info("eval at step {}: loss {:.4f}, perplexity {:.2f} over {} tokens ({:.1f} s)", step, r.loss,
               r.perplexity, r.tokens, now_s() - t0);
  return Status::ok();
}

void Trainer::status_line(int64_t step, double loss, double tok_s, double mfu, double wait_ms, bool final) {
  double now = now_s();
  if (!final && now - last_status_s_ < (tty_ ? 0.2 : c_.train.status_interval_s)) return;
  last_status_s_ = now;
  const double elapsed = now - run_start_s_;
  const double done = (double)(step - start_step_), left = (double)(total_steps_ - step);
  std::string where = c_.train.steps > 0 ? fmt::format("step {}/{}", step, total_steps_)
                                        : fmt::format("step {} | tokens {}/{}", step, human_count((double)tokens_),
                                                      human_count((double)c_.train.max_tokens));
  std::string line = fmt::format("{} | loss {:.4f} | {} tok/s | mfu {:.1f}% | data wait {:.1f} ms | eta {}", where,
                                 loss, human_count(tok_s), 100 * mfu, wait_ms,
                                 done > 0 && left >= 0 ? duration_str(elapsed / done * left) : "?");
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
    std::fflush(stderr);
  } else {
    spdlog::info("{}", line);
  }
}

Status Trainer::run(TrainSummary& out) {
  g_stop = false;
  if (Status s = setup(); !s) return s;
  if (c_.resume) {
    if (Status s = resume_from_checkpoint(); !s) return s;
  } else if (fs::exists(metrics_path_)) {
    // A fresh run in a used folder starts a fresh metrics file (checkpoints stay until retention).
    std::error_code ec;
    fs::remove(metrics_path_, ec);
  }
  if (Status s = feed_.open(c_.data, have_resume_pos_ ? &loader_pos_ : nullptr); !s) return s;
  metrics_.open(metrics_path_, std::ios::app);
  if (!metrics_) return Status::error(fmt::format("{}: cannot open for writing", metrics_path_));
  peak_gflops_ = c_.train.peak_gflops > 0 ? c_.train.peak_gflops : measure_sgemm_gflops(threads_);
  spdlog::info("run {}: {} steps x {} micro-batch(es) of up to {}x{} tokens, {} threads, sgemm {:.1f} GFLOP/s{}",
               run_dir_, total_steps_, c_.train.grad_accum, B_, T_, threads_, peak_gflops_,
               c_.train.peak_gflops > 0 ? " (configured)" : " (measured)");
  tty_ = isatty(STDERR_FILENO);
  run_start_s_ = now_s();
  const bool evaluating = !c_.eval.data.empty();
  if (evaluating && step_ == 0) {
    ojson line;
    line["step"] = 0;
    if (Status s = eval_now(0, &line); !s) return s;
    metrics_ << line.dump() << "\n" << std::flush;
  }
  const int64_t stop_tokens = c_.train.max_tokens;
  const int K = c_.train.sparsity_every;
  std::vector<double> src_sum(feed_.names.size()), src_n(feed_.names.size());
  double last_tok_s = 0, last_mfu = 0, last_wait = 0;
  // Steps stop the run when given; otherwise tokens do (total_steps_ then only lays out the schedule).
  auto done = [&] {
    return (c_.train.steps > 0 && step_ >= c_.train.steps) || (stop_tokens > 0 && tokens_ >= (uint64_t)stop_tokens);
  };
  while (!done() && !g_stop) {
    const double t0 = now_s();
    const double lr = lr_at(c_.schedule, step_);
    model_.zero_grad();
    double loss_sum = 0, entropy = 0, wait_ms = 0, sparsity = -1;
    uint64_t step_tokens = 0;
    std::fill(src_sum.begin(), src_sum.end(), 0.0);
    std::fill(src_n.begin(), src_n.end(), 0.0);
    int T_step = T_;
    for (int micro = 0; micro < c_.train.grad_accum; micro++) {
      const Batch& b = feed_.next();
      wait_ms += feed_.last_wait_ms();
      float loss = 0;
      if (Status s = model_.forward(b, loss); !s)
        return Status::error(fmt::format("step {}: {}", step_ + 1, s.message()));
      T_step = b.T;
      loss_sum += loss;
      step_tokens += b.target_tokens;
      if (c_.train.entropy_rows > 0) entropy += model_.prediction_entropy(c_.train.entropy_rows);
      if (K > 0 && micro == 0 && (step_ + 1) % K == 0) sparsity = model_.attention_sparsity();
      const float* tl = model_.token_losses();
      for (int n = 0, N = b.B * b.T; n < N; n++)
        if (b.targets[n] >= 0 && b.sources[n] < src_sum.size()) {
          src_sum[b.sources[n]] += tl[n];
          src_n[b.sources[n]] += 1;
        }
      model_.backward(b.target_tokens ? 1.0f / ((float)b.target_tokens * c_.train.grad_accum) : 0.0f);
    }
    const double loss = loss_sum / c_.train.grad_accum;
    AdamWConfig h = c_.optim;
    h.lr = (float)lr;
    const double grad_norm = model_.optimizer_step(h);
    loader_pos_ = feed_.position();
    step_++;
    tokens_ += step_tokens;
    tokens_this_run_ += step_tokens;
    const double step_ms = (now_s() - t0) * 1e3;
    sum_step_ms_ += step_ms;
    sum_wait_ms_ += wait_ms;
    const double tok_s = step_tokens / (step_ms / 1e3);
    const double mfu = train_flops_per_token(c_.model, T_step) * tok_s / (peak_gflops_ * 1e9);
    if (!std::isfinite(first_loss_)) first_loss_ = loss;
    last_loss_ = loss;
    last_tok_s = tok_s, last_mfu = mfu, last_wait = wait_ms;

    ojson line;
    line["step"] = step_;
    line["loss"] = loss;
    line["lr"] = lr;
    line["grad_norm"] = grad_norm;
    line["grad_norm_ratio"] = prev_grad_norm_ > 0 ? grad_norm / prev_grad_norm_ : 1.0;
    line["tokens"] = tokens_;
    line["token_entropy"] = entropy / c_.train.grad_accum;
    if (sparsity >= 0) line["attn_sparsity"] = sparsity;
    ojson per_source = ojson::object();
    for (size_t i = 0; i < src_sum.size(); i++)
      if (src_n[i] > 0) per_source[feed_.names[i]] = src_sum[i] / src_n[i];
    line["loss_by_source"] = per_source;
    // timing (the only fields that differ between identical runs)
    line["tokens_per_s"] = tok_s;
    line["mfu"] = mfu;
    line["step_ms"] = step_ms;
    line["data_wait_ms"] = wait_ms;
    const auto lat = feed_.latency().stats();
    line["fetch_ms"] = {{"p50", lat.p50}, {"p95", lat.p95}, {"p99", lat.p99}};
    prev_grad_norm_ = grad_norm;

    const bool last = done();
    // A signal adds nothing to the metrics (a resumed run's file equals an uninterrupted run's).
    if (evaluating && ((c_.eval.every > 0 && step_ % c_.eval.every == 0) || last)) {
      if (Status s = eval_now(step_, &line); !s) return s;
    }
    if (step_ % c_.train.log_every == 0 || last) metrics_ << line.dump() << "\n" << std::flush;
    status_line(step_, loss, tok_s, mfu, wait_ms, false);
    if (!std::isfinite(loss)) spdlog::warn("step {}: loss is {}", step_, loss);
    const bool periodic = c_.ckpt.save_every > 0 && step_ % c_.ckpt.save_every == 0;
    if (periodic || g_stop || (last && c_.ckpt.save_at_end)) {
      if (Status s = save(step_, g_stop ? "signal" : periodic ? "periodic" : "end"); !s) return s;
    }
  }
  status_line(step_, last_loss_, last_tok_s, last_mfu, last_wait, true);
  const double seconds = now_s() - run_start_s_;

  out = TrainSummary{};
  out.start_step = start_step_;
  out.steps = step_;
  out.tokens = tokens_;
  out.first_loss = first_loss_;
  out.last_loss = last_loss_;
  out.eval_first = eval_first_;
  out.eval_last = eval_last_;
  out.seconds = seconds;
  out.tokens_per_s = sum_step_ms_ > 0 ? tokens_this_run_ / (sum_step_ms_ / 1e3) : 0;
  out.sgemm_gflops = peak_gflops_;
  out.mfu = train_flops_per_token(c_.model, T_) * out.tokens_per_s / (peak_gflops_ * 1e9);
  out.data_wait_fraction = sum_step_ms_ > 0 ? sum_wait_ms_ / sum_step_ms_ : 0;
  out.checkpoint = last_ckpt_;
  out.stopped_by_signal = g_stop;
  const auto lat = feed_.latency().stats();
  json j;
  j["stage"] = "train";
  j["run_dir"] = run_dir_;
  j["steps"] = step_;
  j["start_step"] = start_step_;
  j["total_steps"] = total_steps_;
  j["tokens"] = tokens_;
  j["parameters"] = model_.layout().total;
  j["first_loss"] = std::isfinite(first_loss_) ? json(first_loss_) : json(nullptr);
  j["last_loss"] = std::isfinite(last_loss_) ? json(last_loss_) : json(nullptr);
  j["eval_first"] = eval_first_ >= 0 ? json(eval_first_) : json(nullptr);
  j["eval_last"] = eval_last_ >= 0 ? json(eval_last_) : json(nullptr);
  j["checkpoint"] = last_ckpt_;
  j["stopped_by_signal"] = out.stopped_by_signal;
  j["timing"] = {{"seconds", seconds},
                 {"tokens_per_s", out.tokens_per_s},
                 {"mfu", out.mfu},
                 {"sgemm_gflops", peak_gflops_},
                 {"flops_per_token", train_flops_per_token(c_.model, T_)},
                 {"data_wait_fraction", out.data_wait_fraction},
                 {"fetch_ms", {{"p50", lat.p50}, {"p95", lat.p95}, {"p99", lat.p99}}},
                 {"threads", threads_}};
  out.json = j;
  out.text = fmt::format(
      "train {}: steps {} -> {} of {}, {} tokens, loss {:.4f} -> {:.4f}{}\n"
      "  {:.0f} tokens/s, MFU {:.1f}% of the measured sgemm {:.1f} GFLOP/s ({} threads), data wait {:.2f}% of step "
      "time, fetch P95 {:.2f} ms, {:.1f} s\n"
      "  checkpoint: {}\n",
      run_dir_, start_step_, step_, total_steps_, human_count((double)tokens_), first_loss_, last_loss_,
      eval_first_ >= 0 ? fmt::format(", validation {:.4f} -> {:.4f} (perplexity {:.1f} -> {:.1f})", eval_first_,
                                     eval_last_, std::exp(eval_first_), std::exp(eval_last_))
                       : std::string(),
      out.tokens_per_s, 100 * out.mfu, peak_gflops_, threads_, 100 * out.data_wait_fraction, lat.p95, seconds,
      last_ckpt_.empty() ? "none" : last_ckpt_);
  if (out.stopped_by_signal) out.text += "  stopped by a signal after the step above; --resume continues\n";
  return files_write_atomic((fs::path(run_dir_) / "summary.json").string(), j.dump(2) + "\n");
}

}  // namespace

Status train_run(const TrainConfig& c, TrainSummary& out) {
  Trainer t(c);
  return t.run(out);
}

}  // namespace smelt
