// Global deduplication across tasks and machines: four stages that talk through files in one work
// folder, so a Slurm job array, mpirun or one machine in a loop can run them (docs/dedup.md
// "Global dedup"). signatures -> buckets -> cluster -> filter; each stage's unit of work (a task, a
// bucket) writes its outputs atomically and is redone whole after a kill; every inter-stage file
// carries a header and a checksum, and a missing, truncated or corrupted one is refused by name.
// Not here: the per-document signature (dedup.hpp) and the streaming index of `smelt prep`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"
#include "smelt/refine/dedup.hpp"
#include "smelt/stage/stage.hpp"

namespace smelt {

// A document's global id: (generation, input file index, record index in the file). It orders
// documents the same way for any task count, and "first" (the survivor of a cluster) is the
// smallest id. This run's documents are generation 15; the kept documents of the earlier runs it is
// deduplicated against (GlobalDedupConfig::against) are generations 0..14, in the order given, so
// they come first and are never dropped.
inline constexpr int kGdFileBits = 20;    // up to 1,048,575 input files
inline constexpr int kGdRecordBits = 32;  // up to 4.29G records per file
inline constexpr int kGdGenerationShift = kGdFileBits + kGdRecordBits;
inline constexpr uint64_t kGdThisRun = 15;
inline constexpr size_t kGdMaxEarlierRuns = 15;
inline uint64_t gd_doc_id(uint64_t file, uint64_t rec, uint64_t generation = kGdThisRun) {
  return (generation << kGdGenerationShift) | (file << kGdRecordBits) | rec;
}
inline uint64_t gd_doc_file(uint64_t id) { return (id >> kGdRecordBits) & ((1ull << kGdFileBits) - 1); }
inline uint64_t gd_doc_rec(uint64_t id) { return id & ((1ull << kGdRecordBits) - 1); }
inline uint64_t gd_doc_generation(uint64_t id) { return (id >> kGdGenerationShift) & 0xf; }

// Why a document was dropped, from the strongest link it has to its cluster (exact > url > near).
enum class GdKind : uint8_t { kExact = 0, kUrl = 1, kNear = 2 };
const char* gd_kind_name(GdKind k);  // "exact", "url", "near"

struct GlobalDedupConfig {
  std::vector<std::string> inputs;  // JSONL(.zst/.gz) files, folders or globs (refined or not)
  std::string work;                 // the work folder: signatures/, pairs/, cluster/, drops/
  std::string output;               // filter's output folder: one part per input file
  DedupConfig dedup;                // exact, near, shingles, bands, rows, seed (as [prep.dedup])
  bool url = true;                  // documents of the same page (page_key of their url) are duplicates
  int tasks = 1;                    // input tasks: file i belongs to task i % tasks
  int buckets = 16;                 // hash ranges of the signatures (the buckets stage's units)
  uint64_t memory_bytes = 1ull << 30;  // buckets stage: sort in memory up to this, spill sorted runs beyond
  int threads = 0;                  // signature threads per task; `run`: units at once (0: all cores)
  std::string text_field = "text";
  int zstd_level = 3;
  bool overwrite = false;           // start again over a work folder of different inputs or settings
  // `run` as one of several processes (mpirun, srun): this rank takes units u with u % ranks == rank
  // of every stage and waits at each stage's end until every unit's output is in the work folder.
  int rank = 0, ranks = 1;
  double poll_s = 0.5;              // how often a waiting rank looks
  // Incremental: the work folders of earlier runs (their signatures complete, the same dedup
  // settings and bucket count). Their documents' signatures join this run's as earlier documents:
  // this run keeps what one run over their inputs and this run's would keep of this run's, and
  // their documents are never dropped (nor their outputs touched).
  std::vector<std::string> against;
};

// What one unit did; every stage fills the common fields and its own.
struct GlobalDedupSummary : StageSummary {
  std::string stage;                 // "signatures", "buckets", "cluster", "filter", "run"
  uint64_t units_done = 0;           // tasks or buckets this call computed
  uint64_t units_skipped = 0;        // already complete (a rerun after a kill redoes only the rest)
  uint64_t documents = 0;            // signatures, filter: documents read
  uint64_t records_skipped = 0;      // unreadable input records (counted, never fatal)
  uint64_t tuples = 0;               // signatures written / read
  uint64_t pairs = 0;                // buckets: duplicate pairs emitted
  uint64_t spilled_runs = 0;         // buckets: sorted runs written to disk (memory over budget)
  uint64_t components = 0;           // cluster: clusters of more than one document
  uint64_t dropped = 0, dropped_exact = 0, dropped_url = 0, dropped_near = 0;
  uint64_t dropped_cross_task = 0;   // dropped documents whose survivor is in another input task
  uint64_t dropped_earlier = 0;      // dropped documents whose survivor is an earlier run's (against)
  uint64_t kept = 0;                 // filter: documents written
  uint64_t peak_memory_bytes = 0;    // the unit's largest in-memory table (buckets, cluster)
  uint64_t bytes_written = 0;        // inter-stage or output bytes written
  double seconds = 0;
};

// The stages. `task` selects one unit of the stage's units (input tasks for signatures and filter,
// buckets for buckets, cluster partitions for cluster); -1 runs every unit of the stage in this
// process. Each stage checks that the previous stage is complete for every unit it reads.
Status gd_signatures(const GlobalDedupConfig& c, int task, GlobalDedupSummary& s);
Status gd_buckets(const GlobalDedupConfig& c, int bucket, GlobalDedupSummary& s);
// Two steps: every partition (task = p of `tasks` partitions of the buckets) labels its pairs'
// components locally; then the merge (task = -1 after all partitions, or `gd_cluster_merge`)
// joins the partitions' labels and writes one drop list per input task.
Status gd_cluster(const GlobalDedupConfig& c, int partition, GlobalDedupSummary& s);
Status gd_cluster_merge(const GlobalDedupConfig& c, GlobalDedupSummary& s);
Status gd_filter(const GlobalDedupConfig& c, int task, GlobalDedupSummary& s);
// Every stage in order on this machine, units in parallel on `threads` threads.
Status gd_run(const GlobalDedupConfig& c, GlobalDedupSummary& s);

// The summary's fields as the JSON a program reads (WORK/stats.json after `run`).
nlohmann::json gd_summary_json(const GlobalDedupSummary& s);

// The dropped documents' ids of a finished cluster stage, sorted (tests, tools).
Status gd_read_drops(const GlobalDedupConfig& c, std::vector<uint64_t>& dropped_ids);

}  // namespace smelt
