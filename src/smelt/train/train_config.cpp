// `smelt train` configuration (train_config.hpp): every section into its typed struct, unknown keys
// and sections rejected with the key named, the resolved table kept for the run folder.
#include "smelt/train/train_config.hpp"

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "smelt/common/config.hpp"
#include "smelt/obs/trace.hpp"

namespace smelt {

namespace {

// Sections of a pipeline config that belong to other stages: `smelt train` reads the same file.
const std::set<std::string> kOtherStages = {"prep", "tokenizer", "tokenize", "pipeline", "generate", "bench"};

void collect(const ConfigSection& s, std::vector<std::string>& errors) {
  for (auto& e : s.finish()) errors.push_back(e);
}

}  // namespace

Status train_config_read(const toml::table& root, TrainConfig& c) {
  std::vector<std::string> errors;
  for (const auto& [k, v] : root) {
    std::string key(k.str());
    static const std::set<std::string> mine = {"model", "data", "train", "optim", "eval", "ckpt", "health", "dist",
                                               "trace", "parallel"};
    if (!mine.count(key) && !kOtherStages.count(key))
      errors.push_back(fmt::format("[{}]: unknown section; `smelt train` reads [model], [data], [train], [optim], "
                                   "[eval], [ckpt], [health], [dist], [trace] and [parallel]", key));
  }
  toml::table resolved;
  if (Status s = model_config_read(root, c.model); !s) errors.push_back(s.message());
  resolved.insert_or_assign("model", model_config_to_toml(c.model));

  toml::table data;
  if (Status s = loader_config_read(root, c.data, &data); !s) {
    // The EOD id may come from [train] tokenizer (the trainer fills it in): only that error waits.
    const bool eod_later = c.data.append_eod && c.data.eod_id < 0 &&
                           root.at_path("train.tokenizer").value_or(std::string()) != "";
    LoaderConfig probe = c.data;
    probe.eod_id = 0;
    if (!eod_later || !loader_config_validate(probe)) errors.push_back(s.message());
  }
  resolved.insert_or_assign("data", std::move(data));

  ConfigSection t(root, "train");
  t.get("run_dir", c.train.run_dir);
  t.get("steps", c.train.steps);
  t.get("max_tokens", c.train.max_tokens);
  t.get("time_budget_minutes", c.train.time_budget_minutes);
  t.get("grad_accum", c.train.grad_accum);
  t.get("threads", c.train.threads);
  t.get("seed", c.train.seed);
  t.get("tokenizer", c.train.tokenizer);
  t.get("memory_mb", c.train.memory_mb);
  t.get("log_every", c.train.log_every);
  t.get("sparsity_every", c.train.sparsity_every);
  t.get("entropy_rows", c.train.entropy_rows);
  t.get("peak_gflops", c.train.peak_gflops);
  t.get("precision", c.train.precision);
  t.get("gemm", c.train.gemm);
  t.get("status_interval_s", c.train.status_interval_s);
  collect(t, errors);
  config_insert(resolved, "train", t.resolved());

  ConfigSection o(root, "optim");
  double lr = c.schedule.lr, min_lr = c.schedule.min_lr, decay_fraction = c.schedule.decay_fraction;
  double beta1 = c.optim.beta1, beta2 = c.optim.beta2, eps = c.optim.eps, wd = c.optim.weight_decay;
  double clip = c.optim.grad_clip;
  o.get("schedule", c.schedule.kind);
  o.get("lr", lr);
  o.get("min_lr", min_lr);
  o.get("warmup_steps", c.schedule.warmup_steps);
  o.get("decay_fraction", decay_fraction);
  o.get("beta1", beta1);
  o.get("beta2", beta2);
  o.get("eps", eps);
  o.get("weight_decay", wd);
  o.get("grad_clip", clip);
  o.get("decay_all", c.optim.decay_all);
  collect(o, errors);
  config_insert(resolved, "optim", o.resolved());
  c.schedule.lr = lr, c.schedule.min_lr = min_lr, c.schedule.decay_fraction = decay_fraction;
  c.optim.lr = (float)lr, c.optim.beta1 = (float)beta1, c.optim.beta2 = (float)beta2, c.optim.eps = (float)eps;
  c.optim.weight_decay = (float)wd, c.optim.grad_clip = (float)clip;

  ConfigSection e(root, "eval");
  e.get("data", c.eval.data);
  e.get("every", c.eval.every);
  e.get("points", c.eval.points);
  e.get("tokens", c.eval.tokens);
  collect(e, errors);
  config_insert(resolved, "eval", e.resolved());

  ConfigSection k(root, "ckpt");
  k.get("save_every", c.ckpt.save_every);
  k.get("keep_last", c.ckpt.keep_last);
  k.get("keep_every", c.ckpt.keep_every);
  k.get("save_at_end", c.ckpt.save_at_end);
  k.get("async", c.ckpt.async);
  k.get("on_error", c.ckpt.on_error);
  k.get("inject_write_mb_s", c.ckpt.inject_write_mb_s);
  collect(k, errors);
  config_insert(resolved, "ckpt", k.resolved());
  if (c.ckpt.on_error != "stop" && c.ckpt.on_error != "continue")
    errors.push_back(fmt::format("[ckpt] on_error = \"{}\": allowed are \"stop\" and \"continue\"", c.ckpt.on_error));
  if (Status s = health_config_read(root, c.health, resolved, errors); !s) errors.push_back(s.message());
  ConfigSection d(root, "dist");
  d.get("allreduce", c.dist.allreduce);
  d.get("ranks_per_node", c.dist.ranks_per_node);
  d.get("timeout_s", c.dist.timeout_s);
  d.get("deterministic", c.dist.deterministic);
  d.get("zero", c.dist.zero);
  d.get("overlap", c.dist.overlap);
  d.get("bucket_mb", c.dist.bucket_mb);
  d.get("inject_hang_rank", c.dist.inject_hang_rank);
  d.get("inject_hang_step", c.dist.inject_hang_step);
  d.get("inject_delay_rank", c.dist.inject_delay_rank);
  d.get("inject_delay_ms", c.dist.inject_delay_ms);
  d.get("inject_delay_step", c.dist.inject_delay_step);
  d.known("compression");
  ConfigSection dc(root, "dist.compression");
  dc.get("type", c.dist.compression);
  dc.get("ratio", c.dist.topk_ratio);
  dc.get("warmup_steps", c.dist.topk_warmup_steps);
  dc.get("momentum", c.dist.topk_momentum);
  collect(dc, errors);
  collect(d, errors);
  config_insert(resolved, "dist", d.resolved());
  config_insert(resolved, "dist.compression", dc.resolved());
  if (Status s = dist_config_validate(c.dist); !s) errors.push_back(s.message());
  ConfigSection tr(root, "trace");
  tr.get("steps", c.trace.steps);
  tr.get("dir", c.trace.dir);
  collect(tr, errors);
  config_insert(resolved, "trace", tr.resolved());
  if (Status s = trace_parse_steps(c.trace.steps, c.trace.first, c.trace.last); !s)
    errors.push_back("[trace] steps = " + s.message());
  ConfigSection pa(root, "parallel");
  pa.get("tp", c.parallel.tp);
  pa.get("pp", c.parallel.pp);
  pa.get("stage_layers", c.parallel.stage_layers);
  collect(pa, errors);
  config_insert(resolved, "parallel", pa.resolved());

  if (!errors.empty()) {
    std::string m = errors[0];
    for (size_t i = 1; i < errors.size(); ++i) m += "\n" + errors[i];
    return Status::error(m);
  }
  c.resolved = std::move(resolved);
  return train_config_validate(c);
}

Status train_config_validate(const TrainConfig& c) {
  const TrainOptions& t = c.train;
  if (Status s = model_config_validate(c.model); !s) return s;
  {
    LoaderConfig probe = c.data;
    if (probe.append_eod && probe.eod_id < 0 && !t.tokenizer.empty()) probe.eod_id = 0;  // from the tokenizer
    if (Status s = loader_config_validate(probe); !s) return s;
  }
  if (c.data.sources.empty())
    return Status::error("[data] sources is empty: give the token shards with --data PREFIX[:WEIGHT],... "
                         "or data.sources in the config");
  if (t.run_dir.empty()) return Status::error("[train] run_dir is empty: give --run-dir DIR");
  if (t.steps < 0) return Status::error(fmt::format("[train] steps = {}: must be >= 0", t.steps));
  if (t.max_tokens < 0) return Status::error(fmt::format("[train] max_tokens = {}: must be >= 0", t.max_tokens));
  if (!(t.time_budget_minutes >= 0))
    return Status::error(fmt::format("[train] time_budget_minutes = {}: must be >= 0", t.time_budget_minutes));
  if (t.steps == 0 && t.max_tokens == 0 && t.time_budget_minutes == 0)
    return Status::error("[train] steps = 0, max_tokens = 0 and time_budget_minutes = 0: give at least one "
                         "stopping rule");
  if (t.grad_accum < 1 || t.grad_accum > 4096)
    return Status::error(fmt::format("[train] grad_accum = {}: must be in [1, 4096]", t.grad_accum));
  if (t.threads < 0 || t.threads > 1024)
    return Status::error(fmt::format("[train] threads = {}: must be in [0, 1024] (0: every core)", t.threads));
  if (t.memory_mb < 0) return Status::error(fmt::format("[train] memory_mb = {}: must be >= 0", t.memory_mb));
  if (t.log_every < 1) return Status::error(fmt::format("[train] log_every = {}: must be >= 1", t.log_every));
  if (t.sparsity_every < 0)
    return Status::error(fmt::format("[train] sparsity_every = {}: must be >= 0", t.sparsity_every));
  if (t.entropy_rows < 0)
    return Status::error(fmt::format("[train] entropy_rows = {}: must be >= 0", t.entropy_rows));
  if (!(t.peak_gflops >= 0)) return Status::error(fmt::format("[train] peak_gflops = {}: must be >= 0", t.peak_gflops));
  if (t.precision != "fp32" && t.precision != "bf16" && t.precision != "auto")
    return Status::error(fmt::format("[train] precision = \"{}\": expected \"fp32\", \"bf16\" or \"auto\"",
                                     t.precision));
  if (t.gemm != "auto" && t.gemm != "openblas" && t.gemm != "onednn")
    return Status::error(fmt::format("[train] gemm = \"{}\": expected \"auto\", \"openblas\" or \"onednn\"", t.gemm));
  if (Status s = lr_schedule_validate(c.schedule); !s) return s;
  const AdamWConfig& o = c.optim;
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return Status::error(fmt::format("[optim] beta1 = {}: must be in [0, 1)", o.beta1));
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return Status::error(fmt::format("[optim] beta2 = {}: must be in [0, 1)", o.beta2));
  if (!(o.eps > 0)) return Status::error(fmt::format("[optim] eps = {}: must be > 0", o.eps));
  if (!(o.weight_decay >= 0))
    return Status::error(fmt::format("[optim] weight_decay = {}: must be >= 0", o.weight_decay));
  if (!std::isfinite(o.grad_clip))
    return Status::error(fmt::format("[optim] grad_clip = {}: must be a number (<= 0 disables clipping)", o.grad_clip));
  if (c.eval.every < 0) return Status::error(fmt::format("[eval] every = {}: must be >= 0", c.eval.every));
  if (c.eval.points < 0) return Status::error(fmt::format("[eval] points = {}: must be >= 0", c.eval.points));
  if (c.eval.points > 0 && c.eval.every > 0)
    return Status::error(fmt::format("[eval] every = {} and points = {}: give one of them", c.eval.every,
                                     c.eval.points));
  if (c.eval.tokens < 1) return Status::error(fmt::format("[eval] tokens = {}: must be >= 1", c.eval.tokens));
  if (c.ckpt.save_every < 0) return Status::error(fmt::format("[ckpt] save_every = {}: must be >= 0", c.ckpt.save_every));
  if (c.ckpt.keep_last < 1) return Status::error(fmt::format("[ckpt] keep_last = {}: must be >= 1", c.ckpt.keep_last));
  if (c.ckpt.keep_every < 0) return Status::error(fmt::format("[ckpt] keep_every = {}: must be >= 0", c.ckpt.keep_every));
  const ParallelOptions& pl = c.parallel;
  if (pl.tp < 1 || pl.tp > 4096) return Status::error(fmt::format("[parallel] tp = {}: must be in [1, 4096]", pl.tp));
  if (pl.pp < 1 || pl.pp > 4096) return Status::error(fmt::format("[parallel] pp = {}: must be in [1, 4096]", pl.pp));
  if (pl.tp * pl.pp > 1 && c.dist.compression == "topk")
    return Status::error(fmt::format("[dist.compression] type = \"topk\" with [parallel] tp = {}, pp = {}: top-k "
                                     "compression is for data parallel alone (its residual is per rank of one "
                                     "layout); use tp = pp = 1 or no compression", pl.tp, pl.pp));
  const int T = c.data.mode == "packed" ? c.data.seq_len : c.data.buckets.back();
  if (T > c.model.max_seq_len)
    return Status::error(fmt::format("[data] {} = {}: longer than [model] max_seq_len = {}",
                                     c.data.mode == "packed" ? "seq_len" : "buckets (largest)", T,
                                     c.model.max_seq_len));
  return Status::ok();
}

std::string train_config_to_string(const TrainConfig& c) { return config_to_string(c.resolved); }

}  // namespace smelt
