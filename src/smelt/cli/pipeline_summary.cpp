// The pipeline's summary (pipeline_summary.hpp): every figure is read from the files the stages
// wrote, so the summary says what is on disk.
#include "smelt/cli/pipeline_summary.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "smelt/common/text_chart.hpp"

namespace smelt {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<json> read_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) {
    json j = json::parse(l, nullptr, false);
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

std::string fmt_bytes(uintmax_t b) {
  if (b >= (1u << 30)) return fmt::format("{:.1f} GB", b / 1073741824.0);
  if (b >= (1u << 20)) return fmt::format("{:.1f} MB", b / 1048576.0);
  return fmt::format("{:.1f} KB", b / 1024.0);
}

uintmax_t size_of(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return fs::file_size(p, ec);
  uintmax_t n = 0;
  if (fs::is_directory(p, ec))
    for (auto& e : fs::recursive_directory_iterator(p, ec))
      if (e.is_regular_file(ec)) n += e.file_size(ec);
  return n;
}

double num(const json& j, const char* key, double fallback = NAN) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

// The training loss averaged over `buckets` equal ranges of steps (one chart column each).
std::vector<std::pair<double, double>> smoothed(const std::vector<std::pair<double, double>>& pts, int buckets) {
  if (pts.size() <= (size_t)buckets) return pts;
  std::vector<std::pair<double, double>> out;
  const size_t per = (pts.size() + buckets - 1) / buckets;
  for (size_t i = 0; i < pts.size(); i += per) {
    double sx = 0, sy = 0;
    size_t n = 0;
    for (size_t k = i; k < std::min(pts.size(), i + per); k++) sx += pts[k].first, sy += pts[k].second, n++;
    out.emplace_back(sx / n, sy / n);
  }
  return out;
}

// The mean speed of the trainer's evaluations (metrics' eval_tokens_per_s); 0 when none.
double mean_eval_speed(const std::vector<json>& metrics) {
  double s = 0;
  int n = 0;
  for (const json& l : metrics)
    if (l.contains("eval_tokens_per_s")) s += l["eval_tokens_per_s"].get<double>(), n++;
  return n ? s / n : 0.0;
}

// Training loss per blend source (metrics' loss_by_source: per language under language_weights),
// the mean of the last `last` steps that have it; empty with one source.
json loss_by_source(const std::vector<json>& metrics, size_t last = 20) {
  std::map<std::string, std::pair<double, int>> sum;
  size_t steps = 0;
  for (auto it = metrics.rbegin(); it != metrics.rend() && steps < last; ++it) {
    if (!it->contains("loss_by_source") || !(*it)["loss_by_source"].is_object()) continue;
    steps++;
    for (const auto& [k, v] : (*it)["loss_by_source"].items())
      if (v.is_number()) sum[k].first += v.get<double>(), sum[k].second++;
  }
  json out = json::object();
  if (sum.size() > 1)
    for (const auto& [k, v] : sum) out[k] = v.first / v.second;
  return out;
}

// The metrics' curves: training loss per step, validation loss and bits per byte per evaluation.
void curves(const std::vector<json>& metrics, std::string& text, json& j, const json& compressors) {
  std::vector<std::pair<double, double>> train, valid, bpb;
  json c = json::array();
  for (const json& l : metrics) {
    if (!l.contains("step")) continue;
    const double step = l["step"].get<double>();
    if (l.contains("loss") && l["loss"].is_number()) train.emplace_back(step, l["loss"].get<double>());
    if (!l.contains("eval_loss")) continue;
    valid.emplace_back(step, l["eval_loss"].get<double>());
    json e = {{"step", step}, {"loss", l["eval_loss"]}};
    if (l.contains("eval_bpb")) {
      bpb.emplace_back(step, l["eval_bpb"].get<double>());
      e["bits_per_byte"] = l["eval_bpb"];
    }
    c.push_back(e);
  }
  j["validation_curve"] = c;
  const int width = 60, height = 12;
  std::string chart = text_chart({{"training loss", '.', smoothed(train, width)}, {"validation loss", 'o', valid}}, {},
                                 width, height, "step", "loss (nats per token)");
  if (!chart.empty()) text += "\n" + chart;
  if (!bpb.empty()) {
    std::vector<ChartLine> refs;
    const char glyphs[] = {'-', '=', '~'};
    int g = 0;
    for (const json& cmp : compressors)
      if (cmp.contains("bits_per_byte"))
        refs.push_back({cmp.value("label", std::string()), cmp["bits_per_byte"].get<double>(), glyphs[g++ % 3]});
    text += "\n" + text_chart({{"validation", 'o', bpb}}, refs, width, 8, "step", "bits per byte of the held-out text");
    std::string row = "  validation bits per byte by step:";
    for (const auto& [s, v] : bpb) row += fmt::format(" {:g}: {:.3f}", s, v);
    text += row + "\n";
  }
}

}  // namespace

json pipeline_read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return json();
  return json::parse(in, nullptr, false);
}

namespace {

// The tasks: each one's headline metric at the run's first and last evaluation (metrics.jsonl) and
// on the final checkpoint (the eval stage's JSON), beside chance.
void tasks_summary(const std::vector<json>& metrics, const json& final_tasks, std::string& text, json& j) {
  const json* first = nullptr;
  const json* last = nullptr;
  for (const json& m : metrics)
    if (m.contains("tasks") && m["tasks"].is_object()) {
      if (!first) first = &m;
      last = &m;
    }
  json out = json::array();
  if (!final_tasks.is_object() || !final_tasks.contains("tasks")) return;
  for (const json& t : final_tasks["tasks"]) {
    const std::string name = t.value("task", std::string()), metric = t.value("metric", std::string());
    json e = {{"task", name}, {"metric", metric}, {"final", t.value("value", 0.0)},
              {"final_stderr", t["metrics"].value(metric + "_stderr", 0.0)}, {"items", t.value("items", 0)},
              {"chance", t.value("chance", json())}};
    std::string over;
    if (first && last && (*first)["tasks"].contains(name)) {
      e["first_step"] = (*first)["step"], e["first"] = (*first)["tasks"][name]["value"];
      e["last_step"] = (*last)["step"], e["last"] = (*last)["tasks"][name]["value"];
      over = fmt::format("{:.3f} at step {} -> {:.3f} at step {} in training; ", e["first"].get<double>(),
                         e["first_step"].get<int64_t>(), e["last"].get<double>(), e["last_step"].get<int64_t>());
    }
    text += fmt::format("  task           {} {}: {}final checkpoint {:.3f} +- {:.3f} over {} items{}\n", name, metric,
                        over, e["final"].get<double>(), e["final_stderr"].get<double>(), e["items"].get<int64_t>(),
                        e["chance"].is_number() ? fmt::format(" (chance {:.2f})", e["chance"].get<double>()) : "");
    out.push_back(e);
  }
  j["tasks"] = out;
}

}  // namespace

void pipeline_summary(const PipelineSummaryInput& in, std::string& text, json& j) {
  json prep = pipeline_read_json(in.refined + "/stats.json");
  // the training shards: tokens of each (null where a shard has no stats), and their sum
  json shards = json::array(), tokens;
  uint64_t sum = 0;
  std::string shard_text;
  for (const PipelineShard& sh : in.shards) {
    const json st = pipeline_read_json(sh.prefix + ".stats.json");
    const json n = st.is_object() ? st.value("tokens", json()) : json();
    if (n.is_number()) tokens = sum += n.get<uint64_t>();
    shards.push_back({{"name", sh.name}, {"prefix", sh.prefix}, {"weight", sh.weight}, {"tokens", n}});
    if (!st.is_object()) continue;
    shard_text += fmt::format("{}{}.bin/.idx ({} tokens{})", shard_text.empty() ? "" : ", ", sh.prefix,
                              n.is_number() ? n.get<uint64_t>() : 0,
                              sh.name.empty() ? std::string() : fmt::format(", weight {:g}", sh.weight));
  }
  json tr = in.run.empty() ? json() : pipeline_read_json(in.run + "/summary.json");
  json ev = in.eval.empty() ? json() : pipeline_read_json(in.eval);
  const std::vector<json> metrics =
      in.run.empty() ? std::vector<json>() : read_lines((fs::path(in.run) / "metrics.jsonl").string());
  j = json::object();
  j["stage"] = "pipeline";
  j["config"] = in.config_path;
  j["seconds"] = in.seconds;
  j["stages"] = json::parse(in.stages.dump());
  j["artifacts"] = {{"refined", in.refined}, {"tokenizer", in.tokenizer}, {"tokens", in.tokens}, {"valid", in.valid},
                    {"run", in.run}, {"eval", in.eval}, {"tasks", in.tasks}, {"sample", in.sample}};
  j["prep"] = prep.is_object() ? json{{"docs_in", prep.value("/documents/read"_json_pointer, json())},
                                      {"docs_out", prep.value("/documents/kept"_json_pointer, json())}}
                               : json();
  j["tokens"] = tokens;
  j["token_shards"] = shards;
  j["train"] = tr.is_object() ? tr : json();
  j["eval"] = ev.is_object() ? ev : json();
  text = fmt::format("\npipeline {} done in {:.1f} min\n", in.config_path, in.seconds / 60);
  for (auto& [k, v] : in.stages.items()) text += fmt::format("  {:<17} {:7.1f} s\n", k, v["seconds"].get<double>());
  text += fmt::format("  refined text   {} ({}{})\n", in.refined, fmt_bytes(size_of(in.refined)),
                      prep.is_object() ? fmt::format(", {} of {} documents kept",
                                                     prep.value("/documents/kept"_json_pointer, 0ull),
                                                     prep.value("/documents/read"_json_pointer, 0ull))
                                       : std::string());
  text += fmt::format("  tokenizer      {}\n", in.tokenizer);
  if (!shard_text.empty())
    text += fmt::format("  token shards   {}{}\n", shard_text,
                        in.valid.empty() ? std::string() : fmt::format(", held out: {}.bin/.idx", in.valid));
  if (tr.is_object()) {
    const json& tm = tr["timing"];
    text += fmt::format("  model          {} ({} parameters), checkpoint {}\n", in.run, tr.value("parameters", 0ll),
                        tr.value("checkpoint", std::string()));
    std::string budget;
    if (tr.contains("time_budget"))
      budget = fmt::format(" in {:.1f} min (time budget {:g} min, ended by {})", tm.value("seconds", 0.0) / 60,
                           tr["time_budget"].value("minutes", 0.0), tr["time_budget"].value("ended_by", std::string()));
    text += fmt::format("  training       {} steps{}, {} tokens, {:.0f} tokens/s ({}), MFU {:.1f}% of the model's "
                        "GEMMs at {:.1f} GFLOP/s, {:.1f}% of the CPU's peak {:.1f} GFLOP/s\n",
                        tr.value("steps", 0ll), budget, tr.value("tokens", 0ull), tm.value("tokens_per_s", 0.0),
                        tm.value("precision", std::string("fp32")), 100 * tm.value("mfu", 0.0),
                        tm.value("gemm_gflops", 0.0), 100 * tm.value("mfu_peak", 0.0), tm.value("peak_gflops", 0.0));
    if (tm.contains("gemm_gflops_end") && tm["gemm_gflops_end"].is_number())
      text += fmt::format("                 (that GEMM rate measured again at the end of training: the start's {:.1f} "
                          "GFLOP/s was below the steps')\n", tm.value("gemm_gflops_start", 0.0));
    const json by_source = loss_by_source(metrics);
    if (!by_source.empty()) {
      text += "  training loss  by blend source, the last 20 steps' mean (nats per token):";
      for (const auto& [k, v] : by_source.items()) text += fmt::format(" {} {:.3f}", k, v.get<double>());
      text += "\n";
    }
    j["train_loss_by_source"] = by_source;
    if (!tr["eval_first"].is_null()) {
      text += fmt::format("  validation     loss {:.3f} -> {:.3f} nats per token (perplexity {:.0f} -> {:.0f})",
                          tr["eval_first"].get<double>(), tr["eval_last"].get<double>(),
                          std::exp(tr["eval_first"].get<double>()), std::exp(tr["eval_last"].get<double>()));
      if (tr.contains("eval_last_bpb") && tr["eval_last_bpb"].is_number())
        text += fmt::format(", {:.3f} -> {:.3f} bits per byte", tr["eval_first_bpb"].get<double>(),
                            tr["eval_last_bpb"].get<double>());
      text += "\n";
    }
  }
  json compressors = ev.is_object() ? ev.value("compressors", json::array()) : json::array();
  if (ev.is_object()) {
    const double bpb = num(ev, "bits_per_byte");
    text += fmt::format("  evaluation     {} tokens = {} bytes of held-out text: {:.3f} nats per token, {:.3f} bits "
                        "per byte\n", ev.value("tokens", 0ull), ev.value("bytes", 0ull), num(ev, "loss"), bpb);
    // Speed: the trainer's evaluations (warm, in the training process) against its forward passes;
    // the eval stage is a fresh process whose first batches pay for setup.
    const double train_eval = mean_eval_speed(metrics), fwd = tr.is_object() ? num(tr["timing"], "forward_tokens_per_s", 0) : 0;
    if (train_eval > 0 && fwd > 0)
      text += fmt::format("  eval speed     {:.0f} tokens/s in training's evaluations, training's forward {:.0f} tokens/s "
                          "(this stage, a fresh process: {:.0f})\n", train_eval, fwd, num(ev, "tokens_per_s", 0));
    j["eval_tokens_per_s_in_training"] = train_eval;
    std::string best;
    double best_bpb = INFINITY;
    for (const json& c : compressors) {
      if (!c.contains("bits_per_byte")) {
        text += fmt::format("  {:<14} did not run: {}\n", c.value("label", std::string()), c.value("error", std::string()));
        continue;
      }
      const double b = c["bits_per_byte"].get<double>();
      text += fmt::format("  {:<14} {:.3f} bits per byte on the same text ({} -> {} bytes)\n", c.value("label", std::string()),
                          b, c.value("bytes_in", 0ull), c.value("bytes_out", 0ull));
      if (b < best_bpb) best_bpb = b, best = c.value("label", std::string());
    }
    if (std::isfinite(best_bpb) && std::isfinite(bpb)) {
      text += bpb < best_bpb ? fmt::format("  => the model codes the held-out text in {:.3f} bits per byte fewer than "
                                           "the best compressor ({})\n", best_bpb - bpb, best)
                             : fmt::format("  => the model needs {:.3f} bits per byte more than {}: it knows less about "
                                           "this text than a general-purpose compressor\n", bpb - best_bpb, best);
      j["beats_compressors"] = bpb < best_bpb;
    }
  }
  if (!in.tasks.empty()) tasks_summary(metrics, pipeline_read_json(in.tasks), text, j);
  if (!in.run.empty()) curves(metrics, text, j, compressors);
  json samples = json::array();
  if (!in.samples.empty()) text += fmt::format("\n  samples        {}\n", in.sampling);
  j["sampling"] = in.sampling;
  for (const auto& s : in.samples) {
    samples.push_back({{"prompt", s.prompt}, {"mode", s.mode}, {"text", s.text}});
    text += fmt::format("\n  sample ({}) \"{}\" ->\n{}\n", s.mode, s.prompt, s.text);
  }
  j["samples"] = samples;
  if (!in.run.empty()) {
    // Serving comes first: it is the one command that puts the model in the tools people use.
    const std::string& sm = in.smelt;
    j["serve_command"] = fmt::format("{} serve --checkpoint {}", sm, in.run);
    j["dashboard_command"] = fmt::format("{} dashboard {}", sm, in.run);
    text += fmt::format("\n  serve it       {}   (OpenAI-compatible, http://127.0.0.1:8000/v1)\n",
                        j["serve_command"].get<std::string>());
    text += fmt::format("  watch it       {}   (curves, vital signs, events: http://127.0.0.1:8080)\n",
                        j["dashboard_command"].get<std::string>());
    text += fmt::format("                 {} report {} -o report.html   (the same page as one file)\n", sm, in.run);
    text += fmt::format("  next           {} generate --checkpoint {} --prompt \"...\"\n", sm, in.run);
    text += fmt::format("                 {} eval --checkpoint {} --data {} --compressors\n", sm, in.run,
                        in.valid.empty() ? std::string("HELDOUT") : in.valid);
    text += fmt::format("                 {} export --checkpoint {} --format gguf --dtype q8_0 --output model.gguf\n",
                        sm, in.run);
    text += fmt::format("                 {} export --checkpoint {} --format hf --output MODEL_DIR\n", sm, in.run);
  }
}

}  // namespace smelt
