// The hosts of a supervised job (`smelt launch --hosts a:2,b:2`): which are up, which failed and
// why, whether a dropped one answers again, and the shape the ranks that are left can run — the
// data-parallel degree shrinks (the global batch kept by more accumulation) and grows back when a
// host returns; tensor and pipeline degrees stay. Not the restart loop (launch/supervisor.cpp).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"
#include "smelt/launch/failure.hpp"
#include "smelt/launch/supervisor.hpp"

namespace smelt {

struct LaunchHost {
  std::string name;
  int slots = 1;
  bool up = true;
  int failures_in_row = 0;  // consecutive failed attempts this host was blamed for
  double down_since = 0;    // when it was dropped (now_s())
  double probed_at = 0;     // when a probe last found it down
  std::string why;          // why it was dropped
};

// What the training command's config says (read from `smelt train ... --print-config`).
struct LaunchLayout {
  int tp = 1, pp = 1;
  int batch_size = 1, grad_accum = 1;
  bool packed = true;  // data.mode = "packed": batch_size is global rows; other modes keep their rank count
};

// One attempt's ranks, where they run, and the batch split that keeps the global batch.
struct LaunchShape {
  int ranks = 0;
  int batch_size = 0, grad_accum = 0;
  bool changed = false;  // batch_size/grad_accum differ from the config's (passed with --set)
  std::vector<std::pair<std::string, int>> hosts;  // in rank order: host, ranks placed there
};

// "a:2,b:2,c" (slots 1 when not given). Errors name the item.
Status launch_hosts_parse(const std::string& spec, std::vector<LaunchHost>& out);
// The config's layout from the TOML that `--print-config` printed.
Status launch_layout_parse(const std::string& toml_text, LaunchLayout& out);
// The largest shape the up hosts hold, at most `np` ranks: the data-parallel degree d is the
// largest with d*tp*pp ranks free and d dividing (np/(tp*pp)) * grad_accum; each rank keeps its
// micro-batch rows (batch_size/dp0) and takes more micro-batches. Fails when fewer than
// `min_ranks` can run, naming the hosts that are down.
Status launch_shape(const LaunchLayout& cfg, int np, int min_ranks, const std::vector<LaunchHost>& hosts,
                    LaunchShape& out);
// The host rank r runs on (hosts filled in order, as mpirun maps by slot); "" when out of range.
std::string launch_rank_host(const LaunchShape& s, int rank);
// After a failed attempt: the host blamed (by the failure's rank, else its host name) counts a
// failure; hosts not blamed start again from none. A host that could not be reached ("launch")
// is dropped at once, one that failed twice in a row too. Returns the dropped host's name or "".
std::string launch_hosts_failed(std::vector<LaunchHost>& hosts, const LaunchShape& shape, const Failure& f,
                                double now);
// Starts `launcher` with one rank on each host to probe (`true` through mpirun/srun, with the
// launcher's words), in parallel; a host that does not answer within timeout_s is down.
// Returns, per host, "" when it answered, else what went wrong (the probe's exit and last line).
std::vector<std::string> launch_probe_hosts(const std::vector<std::string>& names, const std::string& launcher,
                                     const std::vector<std::string>& launcher_args, double timeout_s);

// The hosts of one supervised run: the config's layout read once, then before each attempt the
// hosts probed (those up, and those dropped at least rejoin_s ago) and the shape picked.
class LaunchFleet {
 public:
  // Parses o.hosts and reads the layout by running the command with --print-config.
  Status open(const LaunchOptions& o, const std::string& launcher);
  // The next attempt's shape; an error when fewer than --min-ranks ranks can run. `notes`: hosts
  // that went down or came back.
  Status plan(LaunchShape& out, std::vector<std::string>& notes);
  // A failed attempt on `shape`: blame (fills f.host from the rank's placement), maybe a drop.
  std::string failed(Failure& f, const LaunchShape& shape);
  // [{"host", "why"}] of the hosts down now.
  nlohmann::ordered_json down_json() const;

 private:
  const LaunchOptions* o_ = nullptr;
  std::string launcher_;
  LaunchLayout layout_;
  std::vector<LaunchHost> hosts_;
};

}  // namespace smelt
