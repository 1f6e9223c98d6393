// The tracer (trace.hpp). Each thread appends to its own buffer, registered once under a lock;
// the hot path takes no lock and allocates only when a 4096-event block fills. Recording on or
// off is one flag; a count of events being recorded (raised before the flag is checked a second
// time, both sequentially consistent) lets the writer know no thread is still appending.
#include "smelt/obs/trace.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "smelt/common/files.hpp"
#include "smelt/common/json_write.hpp"

namespace smelt {

namespace trace_detail {
alignas(64) std::atomic<bool> g_on{false};  // read at every site: a line no event writes
}  // namespace trace_detail

namespace {

using trace_detail::Arg;

struct Event {
  const char* name;
  int64_t t0_ns, t1_ns;  // X: begin and end; i, C: t0
  Arg args[TraceSpan::kMaxArgs];
  int32_t depth;         // X: spans open on the thread when it began (parents sort first)
  uint8_t nargs;
  char ph;               // 'X', 'i', 'C'
  char scope;            // i: 'g' | 'p' | 't'
};

constexpr int64_t kBlock = 4096;

// One thread's events; only its thread appends, and the writer reads it only when trace_idle().
struct ThreadBuffer {
  std::vector<std::unique_ptr<Event[]>> blocks;
  int64_t n = 0;
  int index = 0;                              // registration order: the track's tid and sort index
  std::atomic<const char*> name{nullptr};
  Event& append() {
    if (n == (int64_t)blocks.size() * kBlock) blocks.emplace_back(new Event[kBlock]);  // (not zeroed)
    Event& e = blocks[n / kBlock][n % kBlock];
    n++;
    return e;
  }
  const Event& at(int64_t i) const { return blocks[i / kBlock][i % kBlock]; }
};

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers;
  std::deque<std::string> interned;
};
// Never destroyed: threads may still record while the process exits.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

alignas(64) std::atomic<int64_t> g_recording{0};  // events between their second flag check and their append

thread_local ThreadBuffer* tls_buffer = nullptr;
thread_local const char* tls_name = nullptr;
thread_local int32_t tls_depth = 0;

ThreadBuffer& buffer() {
  if (!tls_buffer) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    auto b = std::make_unique<ThreadBuffer>();
    b->index = (int)r.buffers.size();
    b->name = tls_name;
    b->blocks.emplace_back(new Event[kBlock]);
    tls_buffer = b.get();
    r.buffers.push_back(std::move(b));
  }
  return *tls_buffer;
}

// The second check: true when the caller may append (and must call leave() after).
bool enter() {
  g_recording.fetch_add(1, std::memory_order_seq_cst);
  if (trace_detail::g_on.load(std::memory_order_seq_cst)) return true;
  g_recording.fetch_sub(1, std::memory_order_seq_cst);
  return false;
}
void leave() { g_recording.fetch_sub(1, std::memory_order_seq_cst); }

int64_t us(int64_t ns) { return ns >= 0 ? ns / 1000 : -((-ns + 999) / 1000); }  // floor

void append_number(std::string& out, double v) {
  if (std::isfinite(v)) fmt::format_to(std::back_inserter(out), "{}", v);
  else out += "null";
}

void append_args(std::string& out, const Event& e) {
  out += ",\"args\":{";
  for (int a = 0; a < e.nargs; a++) {
    if (a) out += ',';
    json_append_string(out, e.args[a].key);
    out += ':';
    append_number(out, e.args[a].value);
  }
  out += '}';
}

}  // namespace

int64_t trace_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void TraceSpan::begin(const char* name) {
  if (!enter()) return;
  name_ = name;
  active_ = true;
  tls_depth++;
  start_ns_ = trace_now_ns();
}

void TraceSpan::end() {
  const int64_t t1 = trace_now_ns();
  Event& e = buffer().append();
  e.name = name_;
  e.t0_ns = start_ns_;
  e.t1_ns = t1;
  e.ph = 'X';
  e.scope = 't';
  e.depth = --tls_depth;
  e.nargs = (uint8_t)nargs_;
  for (int a = 0; a < nargs_; a++) e.args[a] = args_[a];
  active_ = false;
  leave();
}

void trace_counter(const char* name, const char* key, double value) {
  if (!trace_on() || !std::isfinite(value) || !enter()) return;
  Event& e = buffer().append();
  e.name = name;
  e.t0_ns = e.t1_ns = trace_now_ns();
  e.ph = 'C';
  e.scope = 'p';
  e.depth = tls_depth;
  e.nargs = 1;
  e.args[0] = {key, value};
  leave();
}

void trace_instant(const char* name, char scope, const char* key, double value) {
  if (!trace_on() || !enter()) return;
  Event& e = buffer().append();
  e.name = name;
  e.t0_ns = e.t1_ns = trace_now_ns();
  e.ph = 'i';
  e.scope = scope == 'g' || scope == 'p' ? scope : 't';
  e.depth = tls_depth;
  e.nargs = key ? 1 : 0;
  if (key) e.args[0] = {key, value};
  leave();
}

void trace_thread_name(const char* name) {
  tls_name = name;
  if (tls_buffer) tls_buffer->name = name;
}

const char* trace_intern(std::string_view s) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  for (const std::string& x : r.interned)
    if (x == s) return x.c_str();
  return r.interned.emplace_back(s).c_str();
}

void trace_start() { trace_detail::g_on.store(true, std::memory_order_seq_cst); }
void trace_stop() { trace_detail::g_on.store(false, std::memory_order_seq_cst); }
bool trace_idle() { return g_recording.load(std::memory_order_seq_cst) == 0; }

int64_t trace_event_count() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  int64_t n = 0;
  for (const auto& b : r.buffers) n += b->n;
  return n;
}

Status trace_write(const std::string& path, const TraceProcessInfo& info, int64_t* events) {
  Registry& r = registry();
  std::string out;
  int64_t count = 0;
  const int pid = trace_pid(info.rank);
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    out.reserve(256 + 160 * (size_t)[&] {
      int64_t n = 0;
      for (const auto& b : r.buffers) n += b->n;
      return n;
    }());
    out += "{\"traceEvents\":[\n";
    auto meta = [&](const char* name, int tid, const char* key, const std::string* text, int number) {
      fmt::format_to(std::back_inserter(out), "{{\"name\":\"{}\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"{}\":",
                     name, pid, tid, key);
      if (text) json_append_string(out, *text);
      else fmt::format_to(std::back_inserter(out), "{}", number);
      out += "}},\n";
    };
    const int main_tid = pid * 10000;
    const std::string pname = fmt::format("rank {}", info.rank);
    meta("process_name", main_tid, "name", &pname, 0);
    meta("process_sort_index", main_tid, "sort_index", nullptr, info.rank);
    if (host[0]) {
      const std::string label = fmt::format("host {}", host);
      meta("process_labels", main_tid, "labels", &label, 0);
    }
    std::vector<const Event*> order;
    for (const auto& b : r.buffers) {
      if (b->n == 0) continue;
      const int tid = pid * 10000 + b->index;
      const char* tname = b->name.load();
      const std::string thread = tname ? std::string(tname) : fmt::format("thread {}", b->index);
      meta("thread_name", tid, "name", &thread, 0);
      meta("thread_sort_index", tid, "sort_index", nullptr, b->index);
      // Per track by start, parents before the children that start in the same microsecond.
      order.clear();
      for (int64_t i = 0; i < b->n; i++) order.push_back(&b->at(i));
      std::stable_sort(order.begin(), order.end(), [](const Event* x, const Event* y) {
        const int64_t a = us(x->t0_ns), c = us(y->t0_ns);
        return a != c ? a < c : x->depth < y->depth;
      });
      for (const Event* e : order) {
        out += "{\"name\":";
        json_append_string(out, e->name);
        const int64_t ts = us(e->t0_ns);
        if (e->ph == 'X')
          fmt::format_to(std::back_inserter(out), ",\"ph\":\"X\",\"ts\":{},\"dur\":{}", ts, us(e->t1_ns) - ts);
        else if (e->ph == 'i')
          fmt::format_to(std::back_inserter(out), ",\"ph\":\"i\",\"s\":\"{}\",\"ts\":{}", e->scope, ts);
        else
          fmt::format_to(std::back_inserter(out), ",\"ph\":\"C\",\"ts\":{}", ts);
        fmt::format_to(std::back_inserter(out), ",\"pid\":{},\"tid\":{}", pid, tid);
        if (e->nargs || e->ph == 'C') append_args(out, *e);
        out += "},\n";
        count++;
      }
      b->blocks.resize(1);
      b->n = 0;
    }
  }
  out.resize(out.size() - 2);  // the last ",\n" (the metadata come first, so there is one)
  nlohmann::json other = info.extra;
  other["producer"] = "smelt";
  other["trace_version"] = 1;
  other["rank"] = info.rank;
  other["world_size"] = info.world_size;
  other["pid"] = pid;
  other["host"] = host;
  other["clock_sync_us"] = info.clock_sync_ns >= 0 ? nlohmann::json(us(info.clock_sync_ns)) : nlohmann::json(nullptr);
  other["events"] = count;
  out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":";
  out += other.dump();
  out += "}\n";
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create the trace folder: {}", parent.string(), ec.message()));
  if (events) *events = count;
  return files_write_atomic(path, out);
}

Status trace_parse_steps(std::string_view text, int64_t& first, int64_t& last) {
  first = 0, last = -1;
  auto trim = [](std::string_view s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    return s;
  };
  const std::string_view t = trim(text);
  if (t.empty()) return Status::ok();
  auto number = [](std::string_view s, int64_t& v) {
    if (s.empty() || s.size() > 15) return false;
    v = 0;
    for (char ch : s) {
      if (ch < '0' || ch > '9') return false;
      v = v * 10 + (ch - '0');
    }
    return true;
  };
  const size_t dash = t.find('-');
  int64_t a = 0, b = 0;
  const bool parsed = dash == std::string_view::npos
                          ? number(t, a) && (b = a, true)
                          : number(trim(t.substr(0, dash)), a) && number(trim(t.substr(dash + 1)), b);
  if (!parsed || a < 1 || b < a)
    return Status::error(fmt::format("\"{}\": expected a step \"N\" or a range of steps \"A-B\" with 1 <= A <= B "
                                     "(steps count from 1, as in metrics.jsonl)", text));
  first = a, last = b;
  return Status::ok();
}

int64_t trace_rss_bytes() {
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  long long size = 0, resident = 0;
  if (std::sscanf(buf, "%lld %lld", &size, &resident) != 2) return 0;
  return resident * (int64_t)::sysconf(_SC_PAGESIZE);
}

}  // namespace smelt
