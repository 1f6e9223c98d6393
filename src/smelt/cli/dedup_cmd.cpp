// `smelt dedup run | signatures | buckets | cluster | filter`: flags into GlobalDedupConfig, then
// one stage (one unit with --task, every unit without) or all of them; prints the summary.
// Not the stages (refine/global_dedup*.cpp).
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/cli/stage_run.hpp"
#include "smelt/refine/global_dedup.hpp"

namespace smelt {

namespace {

constexpr const char* kUsage =
    "smelt dedup: deduplication across every task and machine (exact, MinHash near and same-URL duplicates; whole "
    "clusters, the smallest (file, record) kept)\n"
    "  smelt dedup run -i INPUT... --work DIR -o OUT [--tasks N] [--buckets B]   every stage on this machine\n"
    "  smelt dedup signatures|buckets|cluster|filter ... [--task I]               one stage (one unit with --task)\n"
    "  smelt dedup cluster --merge ...                                           joins the cluster partitions\n"
    "every stage takes the same -i, --work, --tasks, --buckets and dedup settings; docs/dedup.md has the Slurm "
    "recipe\n";

struct DedupFlags {
  GlobalDedupConfig c;
  int task = -1;
  bool merge = false;
  double memory_mb = 1024;
  bool no_exact = false, no_near = false, no_url = false;
};

void add_flags(CLI::App& app, DedupFlags& f, const std::string& stage) {
  GlobalDedupConfig& c = f.c;
  app.add_option("-i,--input", c.inputs, "JSONL(.zst/.gz) or text files, folders or globs (required)")->required();
  app.add_option("--work", c.work, "the work folder between stages, shared by every task (required)")->required();
  if (stage == "run" || stage == "filter")
    app.add_option("-o,--output", c.output, "output folder: part-FFFFF.jsonl.zst per input file F (required)")
        ->required();
  app.add_option("--tasks", c.tasks, "input tasks: file i belongs to task i % N (default 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--buckets", c.buckets, "hash ranges of the signatures, the buckets stage's units (default 16)")
      ->check(CLI::Range(1, 1 << 20));
  if (stage != "run")
    app.add_option("--task", f.task,
                   stage == "buckets" ? "this bucket (default: every bucket)"
                   : stage == "cluster" ? "this partition, 0..tasks-1 (default: every partition, then the merge)"
                                        : "this task, 0..tasks-1 (default: every task)")
        ->check(CLI::NonNegativeNumber);
  if (stage == "cluster") app.add_flag("--merge", f.merge, "join the partitions' labels into the drop lists");
  app.add_option("--memory-mb", f.memory_mb, "buckets: sort up to this in memory, spill sorted runs beyond (default 1024)")
      ->check(CLI::PositiveNumber);
  app.add_option("-t,--threads", c.threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_flag("--no-exact", f.no_exact, "no exact-duplicate keys");
  app.add_flag("--no-near", f.no_near, "no MinHash band keys");
  app.add_flag("--no-url", f.no_url, "documents of the same page (URL host and path) are not duplicates");
  app.add_option("--bands", c.dedup.bands, "LSH bands (default 14)")->check(CLI::PositiveNumber);
  app.add_option("--rows", c.dedup.rows, "min-hashes per band (default 8)")->check(CLI::PositiveNumber);
  app.add_option("--shingle", c.dedup.shingle, "words per shingle (default 5)")->check(CLI::PositiveNumber);
  app.add_option("--cjk-shingle", c.dedup.cjk_shingle, "characters per shingle for Chinese (default 5)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", c.dedup.seed, "seeds the MinHash permutations (default 1)");
  app.add_option("--text-field", c.text_field, "JSONL field holding the text (default: text)");
  app.add_flag("--overwrite", c.overwrite, "redo units of a work folder of other inputs or settings");
  app.add_option("--against", c.against,
                 "earlier runs' work folders (incremental): documents linked to their kept documents are dropped");
  if (stage == "run") {
    app.add_option("--rank", c.rank, "this process's rank among --ranks (default: mpirun's, else 0)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--ranks", c.ranks, "processes sharing the run: each takes every ranks-th unit of each stage "
                                       "(default: mpirun's -np, else 1; under srun: $SLURM_NTASKS)")
        ->check(CLI::PositiveNumber);
  }
}

// mpirun's rank and size (Open MPI, or any PMI launcher), when the flags do not say.
void ranks_from_launcher(GlobalDedupConfig& c, const CLI::App& app) {
  if (app.count("--ranks") || app.count("--rank")) return;
  for (auto [rank, size] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    const char* r = std::getenv(rank);
    const char* n = std::getenv(size);
    if (r && n) {
      c.rank = std::atoi(r);
      c.ranks = std::max(1, std::atoi(n));
      return;
    }
  }
}

std::string stage_text(const GlobalDedupSummary& s) {
  std::string t = fmt::format("dedup {}: {} unit(s) done, {} already complete", s.stage, s.units_done, s.units_skipped);
  if (s.stage == "signatures") t += fmt::format("; {} documents, {} tuples", s.documents, s.tuples);
  if (s.stage == "buckets") t += fmt::format("; {} tuples, {} pairs, {} runs spilled", s.tuples, s.pairs, s.spilled_runs);
  if (s.stage == "cluster" && s.dropped + s.components > 0)
    t += fmt::format("; {} clusters, {} documents to drop ({} across tasks)", s.components, s.dropped,
                     s.dropped_cross_task);
  if (s.stage == "filter") t += fmt::format("; kept {} of {} documents, dropped {}", s.kept, s.documents, s.dropped);
  return t + "\n";
}

}  // namespace

int cli_dedup(int argc, char** argv) {
  const std::string stage = argc > 1 ? argv[1] : "";
  if (stage != "run" && stage != "signatures" && stage != "buckets" && stage != "cluster" && stage != "filter") {
    std::fputs(kUsage, stage == "--help" || stage == "-h" ? stdout : stderr);
    return stage == "--help" || stage == "-h" ? kExitOk : kExitUsage;
  }
  CLI::App app{fmt::format("smelt dedup {}", stage)};
  app.name("smelt dedup " + stage);
  DedupFlags f;
  add_flags(app, f, stage);
  if (int rc = cli_parse(app, argc - 1, argv + 1, "dedup"); rc >= 0) return rc;
  if (stage == "run") ranks_from_launcher(f.c, app);
  if (f.c.rank >= f.c.ranks) {
    spdlog::error("smelt dedup run: --rank {} with --ranks {}: expected a rank below the rank count", f.c.rank, f.c.ranks);
    return kExitUsage;
  }
  const int units = stage == "buckets" ? f.c.buckets : f.c.tasks;
  if (f.task >= units || (f.merge && f.task >= 0)) {
    spdlog::error("smelt dedup {}: --task {} with --{} {}: expected {}", stage, f.task,
                  stage == "buckets" ? "buckets" : "tasks", units,
                  f.merge ? "no --task with --merge" : "a unit below that count");
    return kExitUsage;
  }
  f.c.dedup.exact = !f.no_exact;
  f.c.dedup.near = !f.no_near;
  f.c.url = !f.no_url;
  f.c.memory_bytes = static_cast<uint64_t>(f.memory_mb * (1 << 20));
  return cli_run_stage<GlobalDedupSummary>([&](GlobalDedupSummary& s) {
    Status st;
    if (stage == "run") st = gd_run(f.c, s);
    else if (stage == "signatures") st = gd_signatures(f.c, f.task, s);
    else if (stage == "buckets") st = gd_buckets(f.c, f.task, s);
    else if (stage == "cluster") st = f.merge ? gd_cluster_merge(f.c, s) : gd_cluster(f.c, f.task, s);
    else st = gd_filter(f.c, f.task, s);
    if (st && stage != "run") s.text = stage_text(s);
    return st;
  });
}

}  // namespace smelt
