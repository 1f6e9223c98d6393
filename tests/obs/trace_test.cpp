// Timeline traces (obs/trace.hpp, `smelt train --trace-steps`, `smelt trace merge | summary`): the
// tracer's files pass a checker written from the Trace Event Format document (trace_validator.hpp);
// off, nothing is recorded or written; a 2-rank run under mpirun with a checkpoint and an
// evaluation inside the traced range gives one valid file per rank with the step's parts, the
// bucket reductions on the communication thread and the checkpoint write on its own; the merge
// aligns the ranks' clocks at their sync point and refuses foreign files; the summary's numbers are
// the spans' own; the file is written when the range ends, while the run goes on.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "obs/trace_validator.hpp"
#include "smelt/obs/trace.hpp"
#include "smelt/obs/trace_tools.hpp"
#include "test_files.hpp"
#include "train_test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

using test::kMpirun;

struct CmdRun {
  int rc = -1;
  std::string out, err;
};

CmdRun run_smelt(const std::string& args, const fs::path& dir, const std::string& prefix = "") {
  const std::string out = (dir / "cmd.out").string(), err = (dir / "cmd.err").string();
  const std::string cmd = prefix + std::string(SMELT_BINARY) + " " + args + " > " + out + " 2> " + err;
  int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, test::read_file(out), test::read_file(err)};
}

json read_json(const fs::path& p) { return json::parse(test::read_file(p.string())); }

std::vector<const test::TraceSpanSeen*> named(const test::TraceCheck& c, const std::string& name) {
  std::vector<const test::TraceSpanSeen*> out;
  for (const auto& s : c.spans)
    if (s.name == name) out.push_back(&s);
  return out;
}

// True when s lies inside a span named `parent` on its own track.
bool inside(const test::TraceCheck& c, const test::TraceSpanSeen& s, const std::string& parent) {
  for (const auto& p : c.spans)
    if (p.name == parent && p.pid == s.pid && p.tid == s.tid && p.ts <= s.ts && s.end <= p.end) return true;
  return false;
}

// Smelt's order (beyond the spec, which lets complete events come in any order): each track's
// events by time, a parent before the children that start in the same microsecond, as viewers
// that take equal timestamps in file order need. (A zero-length span may precede a sibling that
// starts in its microsecond.)
std::string out_of_track_order(const json& doc) {
  std::map<std::pair<int64_t, int64_t>, std::pair<double, double>> last;  // track -> (ts, dur) of the last X
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const auto track = std::make_pair(e["pid"].get<int64_t>(), e["tid"].get<int64_t>());
    const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    auto it = last.find(track);
    if (it != last.end() &&
        (ts < it->second.first || (ts == it->second.first && dur > it->second.second && it->second.second > 0)))
      return e.dump();
    last[track] = {ts, dur};
  }
  return "";
}

// Count, total, nearest-rank percentiles of the durations (ms), as a reader of the spec would.
struct Stats {
  int64_t count = 0;
  double total = 0, p50 = 0, p95 = 0, p99 = 0;
};
std::map<std::string, Stats> stats_of(const json& doc) {
  std::map<std::string, std::vector<double>> d;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X") d[e["name"].get<std::string>()].push_back(e["dur"].get<double>() / 1000.0);
  std::map<std::string, Stats> out;
  for (auto& [name, v] : d) {
    std::sort(v.begin(), v.end());
    Stats s;
    s.count = (int64_t)v.size();
    for (double x : v) s.total += x;
    auto pct = [&](double p) {
      size_t rank = 1;
      while ((double)rank < p / 100.0 * (double)v.size()) rank++;  // smallest rank with >= p% at or below
      return v[std::min(rank, v.size()) - 1];
    };
    s.p50 = pct(50), s.p95 = pct(95), s.p99 = pct(99);
    out[name] = s;
  }
  return out;
}

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_stop();
    dir_ = test::fresh_test_dir("smelt_trace");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TraceTest, StepRangesParse) {
  int64_t a = 0, b = 0;
  ASSERT_TRUE(trace_parse_steps("10-12", a, b).is_ok());
  EXPECT_EQ(a, 10);
  EXPECT_EQ(b, 12);
  ASSERT_TRUE(trace_parse_steps("7", a, b).is_ok());
  EXPECT_EQ(a, 7);
  EXPECT_EQ(b, 7);
  ASSERT_TRUE(trace_parse_steps(" 3 - 5 ", a, b).is_ok());
  EXPECT_EQ(a, 3);
  EXPECT_EQ(b, 5);
  ASSERT_TRUE(trace_parse_steps("", a, b).is_ok());
  EXPECT_EQ(a, 0);  // off
  for (const char* bad : {"0", "5-3", "a-b", "-3", "1-", "1-2-3", "1.5", "0-4", "x"}) {
    Status s = trace_parse_steps(bad, a, b);
    EXPECT_FALSE(s.is_ok()) << bad;
    EXPECT_NE(s.message().find("A-B"), std::string::npos) << s.message();
  }
}

TEST_F(TraceTest, OffRecordsNothing) {
  const int64_t before = trace_event_count();
  {
    TraceSpan s("off", "k", 1);
    EXPECT_FALSE(s.active());
    trace_counter("c", "v", 1);
    trace_instant("i", 'p');
  }
  std::thread([] { TraceSpan s("off.thread"); }).join();
  EXPECT_EQ(trace_event_count(), before);
}

// Nested spans on the main thread, spans on two more threads (one unnamed), counters and instants
// of every scope: the file passes the spec's checks, each thread is its own named track, and spans
// keep their nesting and arguments.
TEST_F(TraceTest, ThreadsAreTracksAndTheFilePassesTheSpecChecks) {
  TraceSpan before("begun.off");  // begun while off: not recorded even though it ends while on
  trace_thread_name("main");
  trace_start();
  {
    TraceSpan outer("outer", "step", 1);
    for (int l = 0; l < 3; l++) {
      TraceSpan layer("layer", "layer", l);
      TraceSpan inner("inner");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    trace_counter("memory", "rss_mb", (double)trace_rss_bytes() / 1e6);
    trace_counter("bad", "x", NAN);  // not recorded
    trace_instant("mark", 'g', "rank", 0);
    trace_instant("proc", 'p');
    trace_instant("thr");
  }
  std::thread t1([] {
    trace_thread_name("worker");
    for (int i = 0; i < 5; i++) {
      TraceSpan s("work", "i", i);
      s.arg("bytes", 4096);
    }
  });
  std::thread t2([] { TraceSpan s("anonymous"); });
  std::thread t3([] { trace_thread_name("silent"); });  // no events: no track
  t1.join(), t2.join(), t3.join();
  auto late = std::make_unique<TraceSpan>("ends.after.stop");
  trace_stop();
  EXPECT_FALSE(trace_idle());
  late.reset();  // begun while on: recorded
  EXPECT_TRUE(trace_idle());
  { TraceSpan off("after.stop"); }
  TraceProcessInfo info;
  info.rank = 3;
  info.world_size = 4;
  info.clock_sync_ns = 123456789;
  info.extra = {{"steps", "1-2"}};
  int64_t events = 0;
  const fs::path path = dir_ / "sub" / "rank3.json";
  ASSERT_TRUE(trace_write(path.string(), info, &events).is_ok());
  EXPECT_EQ(trace_event_count(), 0);  // the buffers are emptied
  const json doc = read_json(path);
  const test::TraceCheck c = test::trace_validate(doc);
  EXPECT_TRUE(c.errors.empty()) << c.first_errors();
  EXPECT_EQ(out_of_track_order(doc), "");
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  EXPECT_EQ(doc["otherData"]["producer"], "smelt");
  EXPECT_EQ(doc["otherData"]["rank"], 3);
  EXPECT_EQ(doc["otherData"]["world_size"], 4);
  EXPECT_EQ(doc["otherData"]["clock_sync_us"], 123456);
  EXPECT_EQ(doc["otherData"]["steps"], "1-2");
  EXPECT_EQ(doc["otherData"]["events"], events);
  EXPECT_EQ(c.rank_of_pid.size(), 1u);
  EXPECT_EQ(c.rank_of_pid.at(trace_pid(3)), 3);
  for (const char* ph : {"X", "C", "i", "M"}) EXPECT_TRUE(c.phases.count(ph)) << ph;
  EXPECT_TRUE(named(c, "begun.off").empty());
  EXPECT_TRUE(named(c, "after.stop").empty());
  EXPECT_EQ(named(c, "ends.after.stop").size(), 1u);
  ASSERT_EQ(named(c, "layer").size(), 3u);
  for (const auto* s : named(c, "layer")) EXPECT_TRUE(inside(c, *s, "outer"));
  for (const auto* s : named(c, "inner")) EXPECT_TRUE(inside(c, *s, "layer"));
  EXPECT_EQ(named(c, "layer")[2]->args["layer"], 2);
  ASSERT_EQ(named(c, "work").size(), 5u);
  EXPECT_EQ(named(c, "work")[0]->args["bytes"], 4096);
  // Tracks: main, worker, one unnamed; the silent thread has none.
  std::map<std::string, int64_t> tid_of;
  for (const auto& [track, name] : c.thread_names) tid_of[name] = track.second;
  EXPECT_EQ(c.thread_names.size(), 3u);
  ASSERT_TRUE(tid_of.count("main") && tid_of.count("worker"));
  EXPECT_EQ(named(c, "outer")[0]->tid, tid_of["main"]);
  EXPECT_EQ(named(c, "work")[0]->tid, tid_of["worker"]);
  EXPECT_NE(named(c, "anonymous")[0]->tid, tid_of["main"]);
  EXPECT_FALSE(tid_of.count("silent"));
  for (const auto& s : c.spans) EXPECT_TRUE(c.thread_names.count({s.pid, s.tid})) << s.name;
  ASSERT_EQ(c.counters.size(), 1u);
  EXPECT_GT(c.counters[0]["args"]["rss_mb"].get<double>(), 1.0);
  std::map<std::string, std::string> scope;
  for (const auto& i : c.instants) scope[i["name"]] = i.value("s", "t");
  EXPECT_EQ(scope["mark"], "g");
  EXPECT_EQ(scope["proc"], "p");
  EXPECT_EQ(scope["thr"], "t");
}

// The checker itself rejects what the spec forbids (so a broken writer cannot pass it).
TEST_F(TraceTest, TheCheckerRejectsBrokenFiles) {
  auto errors = [](const json& events) {
    json doc = {{"traceEvents", events}};
    return test::trace_validate(doc).errors.size();
  };
  const json name = {{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "rank 0"}}}};
  auto x = [](double ts, double dur) {
    return json{{"name", "s"}, {"ph", "X"}, {"ts", ts}, {"dur", dur}, {"pid", 1}, {"tid", 1}};
  };
  EXPECT_EQ(errors({name, x(0, 10), x(2, 3), x(5, 5), x(10, 1)}), 0u);
  EXPECT_GT(errors({name, x(0, 10), x(5, 10)}), 0u);  // overlap without nesting
  EXPECT_GT(errors({name, x(0, -1)}), 0u);
  EXPECT_GT(errors({x(0, 1)}), 0u);  // a pid without its process_name
  EXPECT_GT(errors({name, {{"name", "b"}, {"ph", "B"}, {"ts", 0}, {"pid", 1}, {"tid", 1}}}), 0u);  // never ended
  EXPECT_GT(errors({name, {{"name", "c"}, {"ph", "C"}, {"ts", 0}, {"pid", 1}, {"tid", 1}, {"args", {{"v", "x"}}}}}),
            0u);
  EXPECT_GT(errors({name, {{"name", "i"}, {"ph", "i"}, {"s", "q"}, {"ts", 0}, {"pid", 1}, {"tid", 1}}}), 0u);
  EXPECT_GT(errors({name, {{"name", "s"}, {"ph", "X"}, {"ts", "0"}, {"dur", 1}, {"pid", 1}, {"tid", 1}}}), 0u);
  json second = name;
  second["pid"] = 2;
  json x2 = x(0, 1);
  x2["pid"] = 2;
  EXPECT_GT(errors({name, second, x(0, 1), x2}), 0u);  // rank 0 on two pids
}

// A hand-made trace: the summary's count, total, nearest-rank percentiles and share of the step
// (X events and B/E pairs alike), in the library and through `smelt trace summary --json`.
TEST_F(TraceTest, SummaryOfAKnownTrace) {
  json ev = json::array();
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "rank 0"}}}});
  double t = 0;
  for (double d : {10.0, 30.0, 20.0, 40.0}) {  // steps of 10, 30, 20, 40 ms
    ev.push_back({{"name", "step"}, {"ph", "X"}, {"ts", t}, {"dur", d * 1000}, {"pid", 1}, {"tid", 1}});
    ev.push_back({{"name", "fetch"}, {"ph", "B"}, {"ts", t}, {"pid", 1}, {"tid", 1}});
    ev.push_back({{"ph", "E"}, {"ts", t + 1000}, {"pid", 1}, {"tid", 1}});
    t += d * 1000;
  }
  test::write_file((dir_ / "known.json").string(), json{{"traceEvents", ev}}.dump());
  TraceSummary sum;
  ASSERT_TRUE(trace_summarize(json{{"traceEvents", ev}}, sum).is_ok());
  EXPECT_EQ(sum.steps, 4);
  EXPECT_DOUBLE_EQ(sum.step_total_ms, 100.0);
  CmdRun r = run_smelt("trace summary " + (dir_ / "known.json").string() + " --json", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["spans"].size(), 2u);
  EXPECT_EQ(j["spans"][0]["name"], "step");  // largest total first
  EXPECT_EQ(j["spans"][0]["count"], 4);
  EXPECT_DOUBLE_EQ(j["spans"][0]["total_ms"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(j["spans"][0]["p50_ms"].get<double>(), 20.0);  // 2nd of 4
  EXPECT_DOUBLE_EQ(j["spans"][0]["p95_ms"].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(j["spans"][0]["share_of_step"].get<double>(), 1.0);
  EXPECT_EQ(j["spans"][1]["name"], "fetch");
  EXPECT_EQ(j["spans"][1]["count"], 4);
  EXPECT_DOUBLE_EQ(j["spans"][1]["total_ms"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(j["spans"][1]["share_of_step"].get<double>(), 0.04);
  r = run_smelt("trace summary " + (dir_ / "known.json").string(), dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("4.0%"), std::string::npos) << r.out;
  // Not a trace: exit 1 naming the file; no file: usage.
  test::write_file((dir_ / "no.json").string(), "{\"x\": 1}");
  r = run_smelt("trace summary " + (dir_ / "no.json").string(), dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("no.json"), std::string::npos) << r.err;
  EXPECT_EQ(run_smelt("trace summary", dir_).rc, 2);
}

// A tiny byte model trained by `smelt train` (one process or under mpirun).
class TraceRunTest : public TraceTest {
 protected:
  void SetUp() override {
    TraceTest::SetUp();
    const std::string d = SMELT_TEST_DATA;
    test::write_byte_shard((dir_ / "train").string(), {d + "/tokenizer/english.txt", d + "/tokenizer/chinese.txt"});
    test::write_byte_shard((dir_ / "valid").string(), {d + "/tokenizer_train/en_coding_style.rst"});
    test::write_file((dir_ / "run.toml").string(), test::byte_model_toml(32, false) + R"([data]
seq_len = 32
batch_size = 4
eod_id = 256
[train]
steps = 6
threads = 1
peak_gflops = 50
[optim]
lr = 3e-3
warmup_steps = 2
[eval]
every = 4
tokens = 512
[ckpt]
save_every = 4
)");
  }
  std::string train_args(const std::string& run, const std::string& extra = "") {
    return fmt::format("train --config {} --data {} --set eval.data=\\\"{}\\\" --run-dir {} {}",
                       (dir_ / "run.toml").string(), (dir_ / "train").string(), (dir_ / "valid").string(),
                       (dir_ / run).string(), extra);
  }
};

TEST_F(TraceRunTest, TwoRanksWithACheckpointGiveValidFilesThatMergeWithAlignedClocks) {
  ASSERT_EQ(std::system("command -v mpirun > /dev/null 2>&1"), 0) << "mpirun is missing";
  // Steps 3-5 hold step 4's checkpoint (its background write) and evaluation; the buckets are
  // small enough that the reduction runs in several.
  CmdRun r = run_smelt(train_args("two", "--trace-steps 3-5 --set dist.bucket_mb=0.05"), dir_,
                       std::string(kMpirun) + " -np 2 ");
  ASSERT_EQ(r.rc, 0) << r.err;
  const fs::path tdir = dir_ / "two" / "trace";
  std::vector<json> docs;
  for (int rank = 0; rank < 2; rank++) {
    const fs::path f = tdir / fmt::format("rank{}.json", rank);
    ASSERT_TRUE(fs::exists(f)) << f;
    docs.push_back(read_json(f));
    const json& doc = docs.back();
    const test::TraceCheck c = test::trace_validate(doc);
    SCOPED_TRACE(f.string());
    EXPECT_TRUE(c.errors.empty()) << c.first_errors();
    EXPECT_EQ(out_of_track_order(doc), "");
    for (const char* ph : {"X", "C", "i", "M"}) EXPECT_TRUE(c.phases.count(ph)) << ph;
    ASSERT_EQ(c.rank_of_pid.size(), 1u);
    EXPECT_EQ(c.rank_of_pid.begin()->second, rank);
    const json& o = doc["otherData"];
    EXPECT_EQ(o["rank"], rank);
    EXPECT_EQ(o["world_size"], 2);
    EXPECT_EQ(o["first_step"], 3);
    EXPECT_EQ(o["last_step"], 5);
    EXPECT_TRUE(o["clock_sync_us"].is_number_integer());
    for (const auto& s : c.spans) EXPECT_TRUE(c.thread_names.count({s.pid, s.tid})) << s.name << " has no thread name";
    // The steps, on one track, and their parts inside them.
    const auto steps = named(c, "step");
    ASSERT_EQ(steps.size(), 3u);
    const int64_t main_tid = steps[0]->tid;
    EXPECT_EQ(c.thread_names.at({steps[0]->pid, main_tid}), "main");
    for (int i = 0; i < 3; i++) {
      EXPECT_EQ(steps[i]->args["step"], 3 + i);
      EXPECT_EQ(steps[i]->tid, main_tid);
    }
    for (const char* part : {"fetch", "forward", "backward", "reduce", "grad_norm", "optimizer"}) {
      ASSERT_GE(named(c, part).size(), 3u) << part;
      for (const auto* s : named(c, part)) EXPECT_TRUE(inside(c, *s, "step") || inside(c, *s, "eval")) << part;
    }
    for (const char* part : {"embedding", "head.loss"})
      for (const auto* s : named(c, part)) EXPECT_TRUE(inside(c, *s, "forward")) << part;
    for (const char* part : {"head.backward", "embedding.backward"})
      for (const auto* s : named(c, part)) EXPECT_TRUE(inside(c, *s, "backward")) << part;
    std::set<int> fwd_layers, bwd_layers;
    for (const auto* s : named(c, "forward.layer")) {
      fwd_layers.insert(s->args["layer"].get<int>());
      EXPECT_TRUE(inside(c, *s, "forward"));
    }
    for (const auto* s : named(c, "backward.layer")) {
      bwd_layers.insert(s->args["layer"].get<int>());
      EXPECT_TRUE(inside(c, *s, "backward"));
    }
    EXPECT_EQ(fwd_layers, (std::set<int>{0, 1}));
    EXPECT_EQ(bwd_layers, (std::set<int>{0, 1}));
    // Each bucket's reduction on the communication thread, with its bytes.
    const auto buckets = named(c, "allreduce.bucket");
    ASSERT_GE(buckets.size(), 6u);  // several per step
    for (const auto* b : buckets) {
      EXPECT_NE(b->tid, main_tid);
      EXPECT_EQ(c.thread_names.at({b->pid, b->tid}), "comm");
      EXPECT_GT(b->args["bytes"].get<double>(), 0);
    }
    EXPECT_FALSE(named(c, "allreduce.scalars").empty());
    // The evaluation after step 4 (every rank evaluates), the counters once per traced step.
    ASSERT_EQ(named(c, "eval").size(), 1u);
    EXPECT_EQ(named(c, "eval")[0]->args["step"], 4);
    EXPECT_EQ(named(c, "eval")[0]->tid, main_tid);
    int tok = 0, mem = 0;
    for (const auto& k : c.counters) {
      if (k["name"] == "tokens_per_s") {
        tok++;
        EXPECT_GT(k["args"]["tokens_per_s"].get<double>(), 0);
      }
      if (k["name"] == "memory") {
        mem++;
        EXPECT_GT(k["args"]["rss_mb"].get<double>(), 1);
      }
    }
    EXPECT_EQ(tok, 3);
    EXPECT_EQ(mem, 3);
    int syncs = 0;
    for (const auto& i : c.instants)
      if (i["name"] == "clock_sync") {
        syncs++;
        EXPECT_EQ(i["s"], "g");
      }
    EXPECT_EQ(syncs, 1);
    if (rank == 0) {  // the replicas' checkpoint: rank 0 stages it, its writer thread writes it
      ASSERT_EQ(named(c, "checkpoint.save").size(), 1u);
      EXPECT_EQ(named(c, "checkpoint.save")[0]->tid, main_tid);
      const auto writes = named(c, "checkpoint.write");
      ASSERT_EQ(writes.size(), 1u);
      EXPECT_NE(writes[0]->tid, main_tid);
      EXPECT_EQ(c.thread_names.at({writes[0]->pid, writes[0]->tid}), "ckpt.writer");
      EXPECT_EQ(writes[0]->args["step"], 4);
      EXPECT_GT(writes[0]->args["bytes"].get<double>(), 1e5);
      EXPECT_GT(writes[0]->args["mb_s"].get<double>(), 0);
      bool instant = false;
      for (const auto& i : c.instants) instant |= i["name"] == "checkpoint" && i["s"] == "p" && i["args"]["step"] == 4;
      EXPECT_TRUE(instant);
    }
  }

  // Merged: both ranks, each on its own pid, the sync points at one time.
  const fs::path merged = dir_ / "merged.json";
  r = run_smelt(fmt::format("trace merge {} {} -o {}", (tdir / "rank1.json").string(), (tdir / "rank0.json").string(),
                            merged.string()),
                dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const json m = read_json(merged);
  const test::TraceCheck mc = test::trace_validate(m);
  EXPECT_TRUE(mc.errors.empty()) << mc.first_errors();
  EXPECT_EQ(mc.rank_of_pid.size(), 2u);
  std::set<int> ranks;
  for (const auto& [pid, rank] : mc.rank_of_pid) ranks.insert(rank);
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
  EXPECT_EQ(named(mc, "step").size(), 6u);
  std::map<int64_t, double> sync_ts;  // pid -> the clock_sync instant's time
  for (const auto& i : mc.instants)
    if (i["name"] == "clock_sync") sync_ts[i["pid"].get<int64_t>()] = i["ts"].get<double>();
  ASSERT_EQ(sync_ts.size(), 2u);
  // Each rank noted its sync point right after the barrier and put the instant a moment later.
  for (const auto& [pid, ts] : sync_ts) {
    EXPECT_GE(ts, m["otherData"]["clock_sync_us"].get<double>());
    EXPECT_LT(ts, m["otherData"]["clock_sync_us"].get<double>() + 1000);
  }
  // A rank whose clock runs 7 s ahead (another machine) merges to the same timeline.
  json shifted = docs[1];
  for (json& e : shifted["traceEvents"])
    if (e.contains("ts") && e["ph"] != "M") e["ts"] = e["ts"].get<int64_t>() + 7000000;
  shifted["otherData"]["clock_sync_us"] = shifted["otherData"]["clock_sync_us"].get<int64_t>() + 7000000;
  test::write_file((dir_ / "rank1_ahead.json").string(), shifted.dump());
  r = run_smelt(fmt::format("trace merge {} {} -o {}", (tdir / "rank0.json").string(),
                            (dir_ / "rank1_ahead.json").string(), (dir_ / "merged2.json").string()),
                dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const json m2 = read_json(dir_ / "merged2.json");
  EXPECT_EQ(m2["otherData"]["inputs"][1]["shift_us"].get<int64_t>(),
            m["otherData"]["inputs"][1]["shift_us"].get<int64_t>() - 7000000);  // rank 1 shifted back
  EXPECT_EQ(m2["traceEvents"], m["traceEvents"]);

  // Refused, naming the file: a rank twice, a trace that is not Smelt's, a merged file.
  r = run_smelt(fmt::format("trace merge {} {} -o {}", (tdir / "rank0.json").string(), (tdir / "rank0.json").string(),
                            (dir_ / "bad.json").string()),
                dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("rank 0 again"), std::string::npos) << r.err;
  test::write_file((dir_ / "chrome.json").string(),
                   R"({"traceEvents":[{"name":"a","ph":"X","ts":0,"dur":1,"pid":1,"tid":1}]})");
  r = run_smelt(fmt::format("trace merge {} {} -o {}", (tdir / "rank0.json").string(), (dir_ / "chrome.json").string(),
                            (dir_ / "bad.json").string()),
                dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("chrome.json: not a Smelt trace"), std::string::npos) << r.err;
  r = run_smelt(fmt::format("trace merge {} -o {}", merged.string(), (dir_ / "bad.json").string()), dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("merged.json"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "bad.json"));

  // The summary's numbers are the spans' own.
  r = run_smelt("trace summary " + merged.string() + " --json", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const json sum = json::parse(r.out);
  const auto want = stats_of(m);
  EXPECT_EQ(sum["processes"], 2);
  EXPECT_EQ(sum["steps"], 6);
  ASSERT_EQ(sum["spans"].size(), want.size());
  const double step_total = want.at("step").total;
  EXPECT_NEAR(sum["step_total_ms"].get<double>(), step_total, 1e-9);
  for (const auto& s : sum["spans"]) {
    const Stats& w = want.at(s["name"].get<std::string>());
    SCOPED_TRACE(s["name"].get<std::string>());
    EXPECT_EQ(s["count"], w.count);
    EXPECT_NEAR(s["total_ms"].get<double>(), w.total, 1e-9);
    EXPECT_NEAR(s["p50_ms"].get<double>(), w.p50, 1e-12);
    EXPECT_NEAR(s["p95_ms"].get<double>(), w.p95, 1e-12);
    EXPECT_NEAR(s["p99_ms"].get<double>(), w.p99, 1e-12);
    EXPECT_NEAR(s["share_of_step"].get<double>(), w.total / step_total, 1e-12);
  }
  r = run_smelt("trace summary " + merged.string(), dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* col : {"step", "forward.layer", "allreduce.bucket", "checkpoint.write", "p95 ms", "of step"})
    EXPECT_NE(r.out.find(col), std::string::npos) << col << "\n" << r.out;
}

// Off: no trace folder (and [trace] is in the resolved config); bad ranges are usage errors
// naming the flag or key.
TEST_F(TraceRunTest, OffWritesNothingAndBadRangesAreUsageErrors) {
  CmdRun r = run_smelt(train_args("off", "--steps 2"), dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "off" / "trace"));
  EXPECT_NE(test::read_file((dir_ / "off" / "config.toml").string()).find("[trace]"), std::string::npos);
  for (const char* bad : {"5-3", "x", "0"}) {
    r = run_smelt(train_args("bad", std::string("--trace-steps ") + bad), dir_);
    EXPECT_EQ(r.rc, 2) << bad;
    EXPECT_NE(r.err.find("--trace-steps"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("\"A-B\""), std::string::npos) << r.err;
  }
  r = run_smelt(train_args("bad", "--set trace.steps=\\\"9-x\\\""), dir_);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("[trace] steps = \"9-x\""), std::string::npos) << r.err;
  r = run_smelt(train_args("bad", "--set trace.step=3"), dir_);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("step"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "bad" / "trace"));
  // A range beyond the run's steps traces nothing; [trace] dir puts the file elsewhere.
  r = run_smelt(train_args("late", "--steps 2 --trace-steps 5-6"), dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "late" / "trace"));
  r = run_smelt(train_args("elsewhere", "--steps 2 --set trace.steps=\\\"2\\\" --set trace.dir=\\\"" +
                                            (dir_ / "traces").string() + "\\\""),
                dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "traces" / "rank0.json"));
  EXPECT_TRUE(test::trace_validate(read_json(dir_ / "traces" / "rank0.json")).errors.empty());
}

// The file appears when the range ends, while the run goes on (then a SIGTERM ends it).
TEST_F(TraceRunTest, TheFileIsWrittenWhenTheRangeEnds) {
  const std::string cmd = std::string(SMELT_BINARY) + " " +
                          train_args("long", "--steps 100000 --trace-steps 2-3 --set eval.every=0") + " 2> " +
                          (dir_ / "long.err").string();
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), (char*)nullptr);
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  const fs::path f = dir_ / "long" / "trace" / "rank0.json";
  bool running = true;
  for (int i = 0; i < 60000 && !fs::exists(f) && running; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    running = waitpid(pid, nullptr, WNOHANG) == 0;
  }
  EXPECT_TRUE(fs::exists(f));
  EXPECT_TRUE(running) << "the run ended before its trace was written: " << test::read_file((dir_ / "long.err").string());
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), 0) << "the run should still be going";
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  const json doc = read_json(f);
  const test::TraceCheck c = test::trace_validate(doc);
  EXPECT_TRUE(c.errors.empty()) << c.first_errors();
  EXPECT_EQ(doc["otherData"]["last_step"], 3);
  const auto steps = named(c, "step");
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0]->args["step"], 2);
  EXPECT_EQ(steps[1]->args["step"], 3);
}

}  // namespace
