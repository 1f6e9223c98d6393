// The trainer's metrics line and summary (step_report.hpp).
#include "smelt/train/step_report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "smelt/hw/cpu_info.hpp"
#include "smelt/train/pipeline.hpp"

namespace smelt {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

ojson step_metrics_line(const StepStats& st, const StepLineFacts& f) {
  ojson line;
  line["step"] = f.step;
  line["loss"] = std::isfinite(st.loss) ? json(st.loss) : json(nullptr);
  line["lr"] = st.lr;
  if (std::isfinite(st.grad_norm)) {
    line["grad_norm"] = st.grad_norm;
    line["grad_norm_ratio"] = f.prev_grad_norm > 0 ? st.grad_norm / f.prev_grad_norm : 1.0;
  } else {
    line["grad_norm"] = nullptr;
    line["skipped"] = "nonfinite";
  }
  line["tokens"] = f.tokens;
  line["token_entropy"] = st.entropy / f.grad_accum;
  if (f.ranks > 1) {
    line["allreduce_ms"] = st.allreduce_ms;
    line["allreduce_wait_ms"] = st.allreduce_wait_ms;
    if (st.overlap) line["allreduce_buckets"] = st.buckets;
    line["allreduce_bytes"] = f.allreduce_bytes;
    line["rank_compute_ms"] = st.rank_compute_ms;
  }
  if (f.model_parallel) {
    // per group, summed over the ranks: bytes sent; TP collectives' time (mean per rank); each
    // stage's wait for its neighbours, and the bubble 1F1B leaves with equal stages
    line["dp_bytes"] = st.dp_bytes;
    line["tp_bytes"] = st.tp_bytes;
    line["pp_bytes"] = st.pp_bytes;
    line["tp_ms"] = st.tp_ms;
    if (f.pp > 1) {
      line["pp_wait_ms"] = st.stage_wait_ms;
      line["pp_bubble"] = pipeline_bubble(f.pp, f.grad_accum);
      double wait = 0;
      for (double w : st.stage_wait_ms) wait += w;
      line["pp_idle_fraction"] = st.step_ms > 0 ? wait / f.pp / st.step_ms : 0.0;
    }
  }
  if (st.sparsity >= 0) line["attn_sparsity"] = st.sparsity;
  ojson per_source = ojson::object();
  for (size_t i = 0; i < st.src_sum.size(); i++)
    if (st.src_n[i] > 0 && f.sources && i < f.sources->size()) per_source[(*f.sources)[i]] = st.src_sum[i] / st.src_n[i];
  line["loss_by_source"] = per_source;
  // timing (the only fields that differ between identical runs)
  line["tokens_per_s"] = st.tok_s;
  line["mfu"] = st.mfu;
  line["mfu_peak"] = f.mfu_peak;
  line["step_ms"] = st.step_ms;
  line["forward_ms"] = st.forward_ms;
  line["data_wait_ms"] = st.wait_ms;
  line["fetch_ms"] = {{"p50", f.fetch.p50}, {"p95", f.fetch.p95}, {"p99", f.fetch.p99}};
  if (f.ckpt_stall_ms > 0) line["ckpt_stall_ms"] = f.ckpt_stall_ms;
  return line;
}

double mfu_of(double per_rank_gflops, double gemm_gflops) {
  return gemm_gflops > 0 ? per_rank_gflops / std::max(gemm_gflops, per_rank_gflops) : 0.0;
}

double mfu_peak_of(double per_rank_gflops, double gemm_gflops, double peak_gflops) {
  const double peak = std::max({peak_gflops, gemm_gflops, per_rank_gflops});
  return peak > 0 ? per_rank_gflops / peak : 0.0;
}

namespace {

json or_null(double v, bool have) { return have ? json(v) : json(nullptr); }

const char* budget_ended_by(const RunFacts& f) {
  if (f.stopped_by_signal) return "signal";
  const bool plan_done = f.planned && f.steps >= f.total_steps;
  if (f.out_of_time && !plan_done) return "deadline";
  return plan_done ? "plan" : "steps or tokens";
}

json timing_json(const RunFacts& f, const TrainSummary& out) {
  const GemmChoice& g = *f.gemm;
  const CpuInfo& cpu = cpu_info_measured();
  const double fwd_tok_s = f.sum_forward_ms > 0 ? f.tokens_this_run / (f.sum_forward_ms / 1e3) : 0.0;
  return {{"seconds", f.seconds},
          {"tokens_per_s", out.tokens_per_s},
          {"forward_tokens_per_s", fwd_tok_s},
          {"mfu", out.mfu},
          {"mfu_peak", out.mfu_peak},
          {"gemm_gflops", out.sgemm_gflops},
          {"gemm_gflops_start", f.gemm_gflops_start},
          {"gemm_gflops_end", or_null(f.gemm_gflops_end, f.gemm_gflops_end >= 0)},
          {"peak_gflops", f.peak.gflops},
          {"precision", f.precision},
          {"gemm", {{"engine", g.engine},
                    {"backend", gemm_backend_name(g.backend)},
                    {"how", g.how},
                    {"fp32_1thread_gflops",
                     {{"openblas", g.openblas_gflops}, {"onednn", g.onednn_gflops}, {"blis", g.blis_gflops}}},
                    {"bf16_1thread_gflops",
                     {{"onednn", g.bf16_onednn_gflops}, {"packed", g.bf16_packed_gflops}, {"chosen", g.bf16_chosen_gflops}}},
                    {"bf16_products", {{"chosen", g.bf16_products}, {"packed", g.bf16_packed}}},
                    {"blas_core", blas_core().name},
                    {"blas_core_fixed_from", blas_core().fixed_from}}},
          {"cpu", {{"model", cpu.model}, {"flags", cpu.flags()}, {"mhz", cpu.mhz}, {"mhz_source", cpu.mhz_source},
                   {"peak_unit", f.peak.unit}}},
          {"flops_per_token", f.flops_per_token},
          {"data_wait_fraction", out.data_wait_fraction},
          {"fetch_ms", {{"p50", f.fetch.p50}, {"p95", f.fetch.p95}, {"p99", f.fetch.p99}}},
          {"threads", f.threads},
          {"ranks", f.ranks},
          {"allreduce", f.allreduce},
          {"nodes", f.nodes},
          {"zero", f.zero},
          {"memory_plan", {{"param_bytes", f.plan->param_bytes},
                           {"grad_bytes", f.plan->grad_bytes},
                           {"optimizer_bytes", f.plan->optimizer_bytes},
                           {"activation_bytes", f.plan->activation_bytes},
                           {"lora_adapters", f.plan->lora_adapters},
                           {"lora_base_dtype", f.plan->lora_base_dtype}}}};
}

json summary_json(const RunFacts& f, const TrainSummary& out) {
  json j;
  j["stage"] = "train";
  j["run_dir"] = f.run_dir;
  j["steps"] = f.steps;
  j["start_step"] = f.start_step;
  j["total_steps"] = f.total_steps;
  j["tokens"] = f.tokens;
  j["parameters"] = f.parameters;
  j["parameters_this_rank"] = f.parameters_this_rank;
  j["parallel"] = {{"dp", f.dp}, {"tp", f.tp}, {"pp", f.pp}};
  json per_rank = json::array();
  for (size_t r = 0; 3 * r + 2 < f.memory_per_rank.size(); r++)
    per_rank.push_back({{"rank", r}, {"planned_bytes", f.memory_per_rank[3 * r]},
                        {"peak_rss_bytes", f.memory_per_rank[3 * r + 1]},
                        {"process_bytes", f.memory_per_rank[3 * r + 2]}});
  j["memory_per_rank"] = per_rank;
  j["first_loss"] = or_null(f.first_loss, std::isfinite(f.first_loss));
  j["last_loss"] = or_null(f.last_loss, std::isfinite(f.last_loss));
  j["eval_first"] = or_null(f.eval_first, f.eval_first >= 0);
  j["eval_last"] = or_null(f.eval_last, f.eval_last >= 0);
  j["eval_first_bpb"] = or_null(f.eval_first_bpb, f.eval_first_bpb >= 0);
  j["eval_last_bpb"] = or_null(f.eval_last_bpb, f.eval_last_bpb >= 0);
  j["checkpoint"] = f.checkpoint;
  j["stopped_by_signal"] = f.stopped_by_signal;
  if (f.budget_s > 0)
    j["time_budget"] = {{"minutes", f.budget_minutes},
                        {"planned_at_step", f.planned_at},
                        {"planned_steps", f.planned ? json(f.total_steps) : json(nullptr)},
                        {"step_ms", f.plan_step_s * 1e3},
                        {"ended_by", budget_ended_by(f)}};
  j["timing"] = timing_json(f, out);
  return j;
}

std::string summary_text(const RunFacts& f, const TrainSummary& out) {
  std::string validation;
  if (f.eval_first >= 0)
    validation = fmt::format(", validation {:.4f} -> {:.4f} (perplexity {:.1f} -> {:.1f}){}", f.eval_first, f.eval_last,
                             std::exp(f.eval_first), std::exp(f.eval_last),
                             f.eval_last_bpb >= 0 ? fmt::format(", {:.3f} -> {:.3f} bits per byte", f.eval_first_bpb,
                                                                f.eval_last_bpb)
                                                  : std::string());
  std::string text = fmt::format(
      "train {}: steps {} -> {} of {}, {} tokens, loss {:.4f} -> {:.4f}{}\n"
      "  {:.0f} tokens/s, MFU {:.1f}% of the model's GEMMs at {:.1f} GFLOP/s, {:.1f}% of the CPU's peak {:.1f} "
      "GFLOP/s ({} threads, {}), data wait {:.2f}% of step time, fetch P95 {:.2f} ms, {:.1f} s\n"
      "  {}; {}\n"
      "  checkpoint: {}\n",
      f.run_dir, f.start_step, f.steps, f.total_steps, human_count((double)f.tokens), f.first_loss, f.last_loss,
      validation, out.tokens_per_s, 100 * out.mfu, out.sgemm_gflops, 100 * out.mfu_peak, f.peak.gflops, f.threads,
      f.precision, 100 * out.data_wait_fraction, f.fetch.p95, f.seconds, f.gemm->report(), blas_core().note(),
      f.checkpoint.empty() ? "none" : f.checkpoint);
  const double steps_gflops = steps_gflops_per_rank(f);
  if (f.gemm_gflops_end >= 0)
    text += fmt::format("  GEMM rate measured again at the end: {:.1f} GFLOP/s (the start's {:.1f} was below the "
                        "{:.1f} the steps reached)\n", f.gemm_gflops_end, f.gemm_gflops_start, steps_gflops);
  if (steps_gflops > f.gemm_gflops && f.gemm_gflops > 0)
    text += fmt::format("  the steps reached {:.1f} GFLOP/s, above the GEMM rate measured ({:.1f}): MFU shows its "
                        "100% cap\n", steps_gflops, f.gemm_gflops);
  if (f.stopped_by_signal) text += "  stopped by a signal after the step above; --resume continues\n";
  if (f.budget_s > 0)
    text += fmt::format("  time budget {:g} min: {} steps planned at step {} ({:.0f} ms a step); ended by {} "
                        "after {:.1f} min\n", f.budget_minutes,
                        f.planned ? std::to_string(f.total_steps) : std::string("no"), f.planned_at,
                        f.plan_step_s * 1e3, budget_ended_by(f), f.seconds / 60);
  return text;
}

}  // namespace

double steps_gflops_per_rank(const RunFacts& f) {
  return f.sum_step_ms > 0 ? f.flops_per_token * f.tokens_this_run / (f.sum_step_ms / 1e3) / 1e9 / f.ranks : 0.0;
}

void run_summary(const RunFacts& f, TrainSummary& out) {
  out = TrainSummary{};
  out.start_step = f.start_step;
  out.steps = f.steps;
  out.tokens = f.tokens;
  out.first_loss = f.first_loss;
  out.last_loss = f.last_loss;
  out.eval_first = f.eval_first;
  out.eval_last = f.eval_last;
  out.seconds = f.seconds;
  out.tokens_per_s = f.sum_step_ms > 0 ? f.tokens_this_run / (f.sum_step_ms / 1e3) : 0;
  const double per_rank_gflops = steps_gflops_per_rank(f);
  out.sgemm_gflops = std::max(f.gemm_gflops, per_rank_gflops);
  out.mfu = mfu_of(per_rank_gflops, f.gemm_gflops);
  out.mfu_peak = mfu_peak_of(per_rank_gflops, f.gemm_gflops, f.peak.gflops);
  out.lead = f.lead;
  out.data_wait_fraction = f.sum_step_ms > 0 ? f.sum_wait_ms / f.sum_step_ms : 0;
  out.checkpoint = f.checkpoint;
  out.stopped_by_signal = f.stopped_by_signal;
  out.json = summary_json(f, out);
  out.text = summary_text(f, out);
}

int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  return 0;
}

ResidentMemory resident_memory() {
  ResidentMemory m;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return m;
  long long size = 0, resident = 0, shared = 0;
  if (std::fscanf(f, "%lld %lld %lld", &size, &resident, &shared) == 3) {
    const int64_t page = sysconf(_SC_PAGESIZE);
    m.bytes = resident * page;
    m.file_bytes = shared * page;
  }
  std::fclose(f);
  return m;
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

double eta_seconds(double elapsed_s, double steps_done, double steps_left, double budget_s) {
  const double by_pace = steps_done > 0 && steps_left >= 0 ? elapsed_s / steps_done * steps_left : -1;
  if (budget_s <= 0) return by_pace;
  const double by_budget = std::max(0.0, budget_s - elapsed_s);
  return by_pace < 0 ? by_budget : std::min(by_pace, by_budget);
}

}  // namespace smelt
