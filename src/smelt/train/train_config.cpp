// `smelt train` configuration (train_config.hpp): every section into its typed struct, unknown keys
// and sections rejected with the key named, the resolved table kept for the run folder.
#include "smelt/train/train_config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <set>

#include <fmt/format.h>

#include "smelt/common/config.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/obs/trace.hpp"

namespace smelt {

namespace {

// Sections of a pipeline config that belong to other stages: `smelt train` reads the same file.
const std::set<std::string> kOtherStages = {"prep", "tokenizer", "tokenize", "pipeline", "generate", "bench"};

const Schema<TrainOptions>& train_schema() {
  using T = TrainOptions;
  static const Schema<TrainOptions> s{
      "train",
      {field("run_dir", &T::run_dir, "the run folder"),
       field("steps", &T::steps, "optimizer steps; 0 = stop by max_tokens only", at_least(0)),
       field("max_tokens", &T::max_tokens, "stop once this many target tokens were trained on (0 = no limit)",
             at_least(0)),
       field("time_budget_minutes", &T::time_budget_minutes, "stop when this much wall time is spent (0 = none)",
             at_least(0)),
       field("grad_accum", &T::grad_accum, "micro-batches per optimizer step", in_range(1, 4096)),
       field("threads", &T::threads, "0 = every core", in_range(0, 1024, "0: every core")),
       field("seed", &T::seed, "weight init"),
       field("tokenizer", &T::tokenizer, "its EOD id feeds the loader; copied into every checkpoint"),
       field("init_from", &T::init_from,
             "start from these weights (run, checkpoint or Hugging Face folder): fresh optimizer and schedule"),
       field("memory_mb", &T::memory_mb, "budget for the memory plan (0 = physical memory)", at_least(0)),
       field("memory_ceiling_mb", &T::memory_ceiling_mb,
             "a rank whose resident memory passes this many MiB stops with the plan beside it (0 = off)", at_least(0)),
       field("log_every", &T::log_every, "a metrics line every N steps", at_least(1)),
       field("sparsity_every", &T::sparsity_every, "attention sparsity sampled every K steps (0 = never)",
             at_least(0)),
       field("entropy_rows", &T::entropy_rows, "rows sampled per micro-batch for the prediction entropy",
             at_least(0)),
       field("peak_gflops", &T::peak_gflops, "the first MFU denominator; 0 = measured at start", at_least(0)),
       field("precision", &T::precision, "the linear layers' numerics (auto: bf16 where the CPU has bf16 units)"),
       field("gemm", &T::gemm, "GEMM back end (auto: measured at the model's shapes, cached; bf16 per product)"),
       field("device", &T::device, "where forward, backward and AdamW run: cpu, or cuda (one NVIDIA GPU)"),
       field("status_interval_s", &T::status_interval_s, "console status lines when stderr is not a terminal")}};
  return s;
}

const Schema<EvalOptions>& eval_schema() {
  using E = EvalOptions;
  static const Schema<EvalOptions> s{
      "eval",
      {field("data", &E::data, "held-out shards ([NAME=]PREFIX,...); \"\" = no evaluation"),
       field("every", &E::every, "every N steps (0 = only at the start and the end)", at_least(0)),
       field("points", &E::points, "instead of every: this many evaluations spread over the run", at_least(0)),
       field("tokens", &E::tokens, "target tokens per evaluation", at_least(1)),
       field("tasks", &E::tasks, "downstream task files or folders scored at each evaluation (docs/eval.md)"),
       field("task_limit", &E::task_limit, "items per task at each evaluation (0: all)", at_least(0)),
       field("task_fewshot", &E::task_fewshot, "examples per item (-1: each task's num_fewshot)", at_least(-1))}};
  return s;
}

const Schema<CkptOptions>& ckpt_schema() {
  using K = CkptOptions;
  static const Schema<CkptOptions> s{
      "ckpt",
      {field("save_every", &K::save_every, "save every N steps (0 = only at the end and on a signal)", at_least(0)),
       field("keep_last", &K::keep_last, "retention: the newest K", at_least(1)),
       field("keep_every", &K::keep_every, "retention: and every M-th step (0 = none)", at_least(0)),
       field("save_at_end", &K::save_at_end, "save after the last step"),
       field("async", &K::async, "a background thread writes the staged state"),
       field("on_error", &K::on_error, "a failed save: stop the run (exit 1) or continue"),
       field("inject_write_mb_s", &K::inject_write_mb_s, "fault injection (tests): saves no faster than this")}};
  return s;
}

const Schema<DistConfig>& dist_schema() {
  using D = DistConfig;
  static const Schema<DistConfig> s{
      "dist",
      {field("allreduce", &D::allreduce, "the reduction's algorithm"),
       field("ranks_per_node", &D::ranks_per_node, "hierarchical: ranks per node (0 = ranks sharing memory)",
             at_least(0, "0: ranks sharing memory")),
       field("timeout_s", &D::timeout_s, "a collective waiting longer ends the job", at_least(0, "0: wait forever")),
       field("deterministic", &D::deterministic, "rank-ordered sums (false: the MPI library's all-reduce)"),
       field("zero", &D::zero, "1: ZeRO-1, the AdamW moments sharded over the ranks",
             in_range(0, 1, "0: off, 1: optimizer state sharded")),
       field("overlap", &D::overlap, "gradient buckets reduced while backward still runs"),
       field("bucket_mb", &D::bucket_mb, "bucket size of the overlapped reduction, in MiB", above(0)),
       field("inject_hang_rank", &D::inject_hang_rank, "fault injection (tests): this rank stops responding"),
       field("inject_hang_step", &D::inject_hang_step, "fault injection (tests): at this step"),
       field("inject_delay_rank", &D::inject_delay_rank, "fault injection (tests): this rank reaches each reduction"),
       field("inject_delay_ms", &D::inject_delay_ms, "fault injection (tests): this much later"),
       field("inject_delay_step", &D::inject_delay_step, "fault injection (tests): from this step on")},
      {"compression"}};
  return s;
}

const Schema<DistConfig>& dist_compression_schema() {
  using D = DistConfig;
  static const Schema<DistConfig> s{
      "dist.compression",
      {field("type", &D::compression, "gradient compression"),
       field("ratio", &D::topk_ratio, "fraction of gradient entries sent", Limits{0, 1, true, false, ""}),
       field("warmup_steps", &D::topk_warmup_steps, "the ratio falls geometrically from 1 over these steps"),
       field("momentum", &D::topk_momentum, "> 0: momentum correction", Limits{0, 1, false, true, ""})}};
  return s;
}

const Schema<TraceOptions>& trace_schema() {
  static const Schema<TraceOptions> s{
      "trace",
      {field("steps", &TraceOptions::steps, "\"A-B\" or \"N\": a timeline trace of these steps (\"\" = none)"),
       field("dir", &TraceOptions::dir, "the rank files' folder (\"\" = RUN/trace)")}};
  return s;
}

const Schema<ParallelOptions>& parallel_schema() {
  using P = ParallelOptions;
  static const Schema<ParallelOptions> s{
      "parallel",
      {field("tp", &P::tp, "tensor-parallel ranks", in_range(1, 4096)),
       field("pp", &P::pp, "pipeline stages", in_range(1, 4096)),
       field("stage_layers", &P::stage_layers, "layers per stage (empty: even)")}};
  return s;
}

const Schema<LoraConfig>& lora_schema() {
  using L = LoraConfig;
  static const Schema<LoraConfig> s{
      "lora",
      {field("rank", &L::rank, "adapter rank (0: no LoRA, every weight trains)", at_least(0)),
       field("alpha", &L::alpha, "the adapters' products are scaled by alpha / rank", above(0)),
       field("dropout", &L::dropout, "dropout on the adapters' inputs while training", Limits{0, 1, false, true, ""}),
       field("targets", &L::targets, "linear layers with adapters: q, k, v, o, gate, up, down"),
       field("init", &L::init, "a PEFT adapter folder to start the adapters from (\"\": A random, B zero)"),
       field("base_dtype", &L::base_dtype, "how the frozen base's layer matrices are held: fp32, bf16 (needs [train] "
             "precision bf16) or q8_0 (int8 blocks, dequantized tile by tile for the GEMMs)")}};
  return s;
}

// Reads one section through its schema into `resolved` under its name.
template <class S>
void read_section(const Schema<S>& sc, const toml::table& root, S& s, toml::table& resolved,
                  std::vector<std::string>& errors) {
  schema_read(sc, root, s, errors);
  config_insert(resolved, sc.section, schema_to_toml(sc, s));
}

// [optim] fills two structs: the schedule (doubles) and AdamW (floats, written back as the
// decimal the float holds, config_float_value). AdamW's lr is the schedule's peak.
const Schema<TrainConfig>& optim_schema() {
  using C = TrainConfig;
  static const Schema<TrainConfig> s{
      "optim",
      {field_at<C>("schedule", [](auto& c) -> auto& { return c.schedule.kind; },
                   "cosine, wsd (warmup-stable-decay) or constant"),
       field_at<C>("lr", [](auto& c) -> auto& { return c.schedule.lr; }, "peak learning rate", above(0)),
       field_at<C>("min_lr", [](auto& c) -> auto& { return c.schedule.min_lr; }, "floor of cosine and WSD",
                   at_least(0)),
       field_at<C>("warmup_steps", [](auto& c) -> auto& { return c.schedule.warmup_steps; },
                   "linear warmup from lr/warmup to lr", at_least(0)),
       field_at<C>("decay_fraction", [](auto& c) -> auto& { return c.schedule.decay_fraction; },
                   "WSD: the last fraction of the steps decays linearly to min_lr", Limits{0, 1, true, false, ""}),
       field_at<C>("beta1", [](auto& c) -> auto& { return c.optim.beta1; }, "AdamW", Limits{0, 1, false, true, ""}),
       field_at<C>("beta2", [](auto& c) -> auto& { return c.optim.beta2; }, "AdamW", Limits{0, 1, false, true, ""}),
       field_at<C>("eps", [](auto& c) -> auto& { return c.optim.eps; }, "AdamW", above(0)),
       field_at<C>("weight_decay", [](auto& c) -> auto& { return c.optim.weight_decay; },
                   "decoupled, on matrices only unless decay_all", at_least(0)),
       field_at<C>("grad_clip", [](auto& c) -> auto& { return c.optim.grad_clip; },
                   "global L2 norm; <= 0 disables", finite()),
       field_at<C>("decay_all", [](auto& c) -> auto& { return c.optim.decay_all; },
                   "also decay norms and embeddings")}};
  return s;
}

void check_sections(const toml::table& root, std::vector<std::string>& errors) {
  static const std::set<std::string> mine = {"model", "data", "train", "optim", "eval", "ckpt", "health", "dist",
                                             "trace", "parallel", "lora"};
  for (const auto& [k, v] : root) {
    std::string key(k.str());
    if (!mine.count(key) && !kOtherStages.count(key))
      errors.push_back(fmt::format("[{}]: unknown section; `smelt train` reads [model], [data], [train], [optim], "
                                   "[eval], [ckpt], [health], [dist], [trace], [parallel] and [lora]", key));
  }
}

}  // namespace

// auto: bf16 where the CPU has bf16 units (its GEMMs then run 2-4x fp32's), fp32 elsewhere.
Precision train_precision(const TrainConfig& c) {
  const bool cuda = c.train.device == DeviceKind::kCuda;
  const bool bf16 = c.train.precision == PrecisionMode::kBf16 ||
                    (c.train.precision == PrecisionMode::kAuto && (cuda || gemm_bf16_native()));
  return bf16 ? Precision::kBf16 : Precision::kFp32;
}

int train_threads(const TrainConfig& c) {
  if (c.train.threads > 0) return c.train.threads;
  int local = 1;  // ranks sharing this machine split its cores
  if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local = std::max(1, std::atoi(v));
  return (int)std::max(1u, std::thread::hardware_concurrency() / (unsigned)local);
}

Status train_config_read(const toml::table& root, TrainConfig& c) {
  std::vector<std::string> errors;
  check_sections(root, errors);
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

  read_section(train_schema(), root, c.train, resolved, errors);
  read_section(optim_schema(), root, c, resolved, errors);
  c.optim.lr = static_cast<float>(c.schedule.lr);
  read_section(eval_schema(), root, c.eval, resolved, errors);
  read_section(ckpt_schema(), root, c.ckpt, resolved, errors);
  health_config_read(root, c.health, resolved, errors);
  read_section(dist_schema(), root, c.dist, resolved, errors);
  read_section(dist_compression_schema(), root, c.dist, resolved, errors);
  if (Status s = dist_config_validate(c.dist); !s) errors.push_back(s.message());
  read_section(trace_schema(), root, c.trace, resolved, errors);
  if (Status s = trace_parse_steps(c.trace.steps, c.trace.first, c.trace.last); !s)
    errors.push_back("[trace] steps = " + s.message());
  read_section(parallel_schema(), root, c.parallel, resolved, errors);
  read_section(lora_schema(), root, c.lora, resolved, errors);
  c.lora.seed = c.train.seed;

  if (!errors.empty()) {
    std::string m = errors[0];
    for (size_t i = 1; i < errors.size(); ++i) m += "\n" + errors[i];
    return Status::error(m);
  }
  c.resolved = std::move(resolved);
  return train_config_validate(c);
}

namespace {
// LoRA adapts a trained model, on the CPU, each rank holding the whole of it.
Status lora_rules(const TrainConfig& c) {
  if (!c.lora.enabled()) return Status::ok();
  if (Status s = lora_config_validate(c.lora); !s) return s;
  if (c.train.init_from.empty())
    return Status::error(fmt::format("[lora] rank = {}: adapters train on a frozen base, so the run needs one: "
                                     "give --init-from (a run, a checkpoint or a Hugging Face folder)", c.lora.rank));
  if (c.parallel.tp * c.parallel.pp > 1)
    return Status::error(fmt::format("[lora] with [parallel] tp = {}, pp = {}: LoRA runs data-parallel only (each "
                                     "rank holds the whole frozen base)", c.parallel.tp, c.parallel.pp));
  if (c.train.device == DeviceKind::kCuda)
    return Status::error("[lora] with [train] device = \"cuda\": the CUDA backend has no adapters yet; train LoRA on the CPU");
  if (c.lora.base_dtype == "bf16" && train_precision(c) != Precision::kBf16)
    return Status::error("[lora] base_dtype = \"bf16\" runs the base's GEMMs on its bf16 copy: it needs [train] precision "
                         "= \"bf16\" (or \"auto\" on a CPU with bf16 units); for an fp32 run use base_dtype \"q8_0\" or \"fp32\"");
  if (!c.eval.tasks.empty())
    return Status::error("[lora] with [eval] tasks: the tasks score a whole model during training; evaluate with the "
                         "held-out loss ([eval] data), or merge the adapters (smelt export --merge-lora) and run smelt "
                         "eval on the export");
  return Status::ok();
}
}  // namespace

Status train_config_validate(const TrainConfig& c) {
  const TrainOptions& t = c.train;
  if (c.data.sources.empty())
    return Status::error("[data] sources is empty: give the token shards with --data PREFIX[:WEIGHT],... "
                         "or data.sources in the config");
  if (t.run_dir.empty()) return Status::error("[train] run_dir is empty: give --run-dir DIR");
  if (t.steps == 0 && t.max_tokens == 0 && t.time_budget_minutes == 0)
    return Status::error("[train] steps = 0, max_tokens = 0 and time_budget_minutes = 0: give at least one "
                         "stopping rule");
  if (Status s = lr_schedule_validate(c.schedule); !s) return s;
  if (Status s = lora_rules(c); !s) return s;
  if (c.eval.points > 0 && c.eval.every > 0)
    return Status::error(fmt::format("[eval] every = {} and points = {}: give one of them", c.eval.every,
                                     c.eval.points));
  const ParallelOptions& pl = c.parallel;
  if (!c.eval.tasks.empty() && (pl.tp * pl.pp > 1 || c.train.device == DeviceKind::kCuda))
    return Status::error(fmt::format("[eval] tasks: scored on one rank's whole copy of the weights on the CPU, which "
                                     "[parallel] tp = {}, pp = {} or [train] device = \"cuda\" does not have; score "
                                     "the run's checkpoints with `smelt eval --tasks` instead (docs/eval.md)", pl.tp, pl.pp));
  if (!c.eval.tasks.empty() && c.train.tokenizer.empty())
    return Status::error("[eval] tasks: the tasks are text, so the run needs its tokenizer: set [train] tokenizer");
  if (pl.tp * pl.pp > 1 && c.dist.compression == GradCompression::kTopk)
    return Status::error(fmt::format("[dist.compression] type = \"topk\" with [parallel] tp = {}, pp = {}: top-k "
                                     "compression is for data parallel alone (its residual is per rank of one "
                                     "layout); use tp = pp = 1 or no compression", pl.tp, pl.pp));
  const int T = c.data.mode == BatchMode::kPacked ? c.data.seq_len : c.data.buckets.back();
  if (T > c.model.max_seq_len)
    return Status::error(fmt::format("[data] {} = {}: longer than [model] max_seq_len = {}",
                                     c.data.mode == BatchMode::kPacked ? "seq_len" : "buckets (largest)", T,
                                     c.model.max_seq_len));
  return Status::ok();
}

std::vector<SectionDoc> train_config_docs() {
  return {section_doc(train_schema()),    section_doc(optim_schema()), section_doc(eval_schema()),
          section_doc(ckpt_schema()),
          section_doc(dist_schema()),     section_doc(dist_compression_schema()),
          section_doc(trace_schema()),    section_doc(parallel_schema()), section_doc(lora_schema())};
}

std::string train_config_to_string(const TrainConfig& c) { return config_to_string(c.resolved); }

}  // namespace smelt
