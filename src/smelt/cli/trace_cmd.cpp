// `smelt trace merge RANK_FILES... -o OUT` and `smelt trace summary FILE [--json]`: the timeline
// traces of `smelt train --trace-steps` merged into one file with aligned clocks, and their spans
// summarised (exit 0, 1 a file that is not a (Smelt) trace, 2 usage). Not the recording
// (obs/trace.hpp); a light command: no MPI, BLAS or OpenMP.
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/obs/trace_tools.hpp"

namespace smelt {

namespace {

int merge_cmd(const std::vector<std::string>& files, const std::string& output) {
  TraceMergeResult r;
  if (Status s = trace_merge(files, output, &r); !s) {
    std::fprintf(stderr, "smelt trace merge: %s\n", s.message().c_str());
    return kExitFailure;
  }
  std::printf("%s: %lld events of %zu rank(s), clocks aligned at the traced range's barrier\n", output.c_str(),
              static_cast<long long>(r.events), r.inputs.size());
  for (const auto& in : r.inputs)
    std::printf("  rank %d  %s  %lld events, shifted %+lld us\n", in.rank, in.file.c_str(),
                static_cast<long long>(in.events), static_cast<long long>(in.shift_us));
  return kExitOk;
}

int summary_cmd(const std::string& file, bool as_json) {
  nlohmann::json trace;
  TraceSummary sum;
  if (Status s = trace_read(file, trace); !s) {
    std::fprintf(stderr, "smelt trace summary: %s\n", s.message().c_str());
    return kExitFailure;
  }
  if (Status s = trace_summarize(trace, sum); !s) {
    std::fprintf(stderr, "smelt trace summary: %s: %s\n", file.c_str(), s.message().c_str());
    return kExitFailure;
  }
  sum.file = file;
  if (as_json) std::printf("%s\n", sum.to_json().dump(1).c_str());
  else std::fputs(sum.text().c_str(), stdout);
  return kExitOk;
}

}  // namespace

int cli_trace(int argc, char** argv) {
  CLI::App app{"smelt trace: timeline traces of `smelt train --trace-steps A-B` (Chrome trace-event JSON; open them "
               "in ui.perfetto.dev or chrome://tracing; docs/trace.md)"};
  app.name("smelt trace");
  app.require_subcommand(1);
  std::vector<std::string> files;
  std::string file, output;
  bool as_json = false;
  CLI::App* merge = app.add_subcommand(
      "merge", "the ranks' files of one run into one trace, each shifted so the ranks' clock sync points coincide");
  merge->add_option("FILES", files, "rank files (RUN/trace/rank*.json)")->required();
  merge->add_option("-o,--output", output, "the merged trace")->required();
  CLI::App* summary = app.add_subcommand(
      "summary", "per span name: count, total, P50/P95/P99 and the share of the step spans' time");
  summary->add_option("FILE", file, "a trace (a rank file or a merged one)")->required();
  summary->add_flag("--json", as_json, "print JSON instead of a table");
  if (int rc = cli_parse_args(app, argc, argv); rc >= 0) return rc;
  if (merge->parsed()) return merge_cmd(files, output);
  return summary_cmd(file, as_json);
}

}  // namespace smelt
