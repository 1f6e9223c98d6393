// Loader benchmark on real token shards: padding waste of packed vs bucketed vs fixed padding (and
// pad-to-longest per batch), and batch fetch latency P50/P95/P99 plus the data-wait share of a
// simulated training step, with and without prefetch threads.
// Usage: loader_bench --data PREFIX[:W],... --eod ID [--seq 512] [--batch 4] [--steps 2000]
//                     [--step-ms 50] [--threads 2] [--buckets 128,256,512,1024,2048] [--max-tokens 16384]
//                     [--stream-input FILES --tokenizer FILE]   (streaming mode: the same latency table)
// Not a test: it prints numbers for bench/RESULTS.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "smelt/dataset/loader.hpp"

using namespace smelt;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Busy work standing in for a training step (sleeping would let the prefetch threads have the cores
// for free; a real step keeps them busy).
void simulated_step(double ms) {
  auto t0 = Clock::now();
  volatile double x = 1;
  while (ms_since(t0) < ms) x = x * 1.0000001 + 1e-9;
}

struct Waste { double slots = 0, real = 0; };

}  // namespace

int main(int argc, char** argv) {
  std::string data, buckets = "128,256,512,1024,2048", stream_input, tokenizer;
  int64_t eod = -1;
  int seq = 512, batch = 4, steps = 2000, threads = 2;
  double step_ms = 50;
  uint64_t max_tokens = 16384;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--data") data = v;
    else if (k == "--eod") eod = std::stoll(v);
    else if (k == "--seq") seq = std::stoi(v);
    else if (k == "--batch") batch = std::stoi(v);
    else if (k == "--steps") steps = std::stoi(v);
    else if (k == "--step-ms") step_ms = std::stod(v);
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--buckets") buckets = v;
    else if (k == "--max-tokens") max_tokens = std::stoull(v);
    else if (k == "--stream-input") stream_input = v;
    else if (k == "--tokenizer") tokenizer = v;
    else { fmt::print(stderr, "unknown flag {}\n", k); return 2; }
  }
  if (data.empty() || eod < 0) {
    fmt::print(stderr, "usage: loader_bench --data PREFIX --eod ID [...]\n");
    return 2;
  }
  LoaderConfig base;
  base.sources = data, base.eod_id = eod, base.seq_len = seq, base.batch_size = batch;
  base.max_tokens_per_batch = max_tokens;
  base.buckets.clear();
  for (size_t at = 0; at < buckets.size();) {
    size_t e = buckets.find(',', at);
    if (e == std::string::npos) e = buckets.size();
    base.buckets.push_back(std::stoi(buckets.substr(at, e - at)));
    at = e + 1;
  }

  // ---- one epoch's documents: lengths for the fixed-padding baselines ----
  std::vector<DataSource> srcs;
  if (Status s = blend_parse_sources(data, srcs); !s) { fmt::print(stderr, "{}\n", s.message()); return 1; }
  uint64_t docs = 0, tokens = 0;
  std::vector<uint64_t> lens;
  for (const auto& s : srcs) {
    IndexedDataset ds;
    if (Status st = ds.open(s.prefix); !st) { fmt::print(stderr, "{}\n", st.message()); return 1; }
    for (uint64_t d = 0; d < ds.documents(); ++d) lens.push_back(indexed_doc_tokens(ds, d) + 1);  // + EOD
    docs += ds.documents(), tokens += ds.tokens();
  }
  fmt::print("data: {} ({} documents, {} tokens; EOD {} appended per document)\n", data, docs, tokens, eod);
  std::vector<uint64_t> sorted = lens;
  std::sort(sorted.begin(), sorted.end());
  fmt::print("document length with EOD: median {}, p90 {}, max {}\n", sorted[sorted.size() / 2],
             sorted[sorted.size() * 9 / 10], sorted.back());

  // Fixed padding to T: one document per row, truncated to T+1 tokens, padded to T.
  auto fixed = [&](uint64_t T) {
    Waste w;
    for (uint64_t L : lens) w.slots += static_cast<double>(T), w.real += static_cast<double>(std::min(L, T + 1) - 1);
    return w;
  };
  // Pad to the longest document of each batch of `rows` documents in the shuffled order (HF-style
  // dynamic padding), truncated to T.
  auto longest = [&](uint64_t T, int rows) {
    Waste w;
    std::vector<uint32_t> perm;
    sampler_permutation(1234, "bench", 0, lens.size(), perm);
    for (size_t i = 0; i < perm.size(); i += static_cast<size_t>(rows)) {
      uint64_t mx = 0, real = 0;
      size_t n = std::min<size_t>(static_cast<size_t>(rows), perm.size() - i);
      for (size_t k = 0; k < n; ++k) {
        uint64_t p = std::min(lens[perm[i + k]], T + 1) - 1;
        mx = std::max(mx, p), real += p;
      }
      w.slots += static_cast<double>(mx * n), w.real += static_cast<double>(real);
    }
    return w;
  };
  // The loader's own modes over about one epoch of tokens.
  auto measure = [&](const LoaderConfig& c, uint64_t want_tokens, double& masked) {
    Loader l;
    if (Status s = l.open(c); !s) { fmt::print(stderr, "{}\n", s.message()); std::exit(1); }
    Waste w;
    double m = 0;
    while (w.real < static_cast<double>(want_tokens)) {
      const Batch& b = l.next();
      w.slots += static_cast<double>(b.B) * b.T;
      for (size_t i = 0; i < b.segments.size(); ++i) w.real += b.segments[i] != -1;
      m += static_cast<double>(b.B) * b.T - static_cast<double>(b.target_tokens);
    }
    masked = m / w.slots;
    return w;
  };
  const uint64_t epoch_tokens = tokens + docs;
  const uint64_t maxb = static_cast<uint64_t>(base.buckets.back());
  auto pct = [](const Waste& w) { return 100.0 * (1.0 - w.real / w.slots); };
  fmt::print("\npadding waste (share of token slots that hold padding), about one epoch:\n");
  fmt::print("| mode | row length | padding waste | no-loss slots |\n|---|---|---|---|\n");
  for (bool mask : {false, true}) {
    LoaderConfig c = base;
    c.prefetch_threads = 0, c.doc_mask = mask;
    c.seq_len = static_cast<int>(maxb);
    double masked;
    Waste w = measure(c, epoch_tokens, masked);
    fmt::print("| packed{} | {} | {:.2f}% | {:.2f}% |\n", mask ? ", doc_mask" : "", maxb, pct(w), 100 * masked);
  }
  {
    LoaderConfig c = base;
    c.prefetch_threads = 0, c.mode = BatchMode::kBucketed;
    double masked;
    Waste w = measure(c, epoch_tokens, masked);
    fmt::print("| bucketed {} (max {} tokens/batch) | per bucket | {:.2f}% | {:.2f}% |\n", buckets, max_tokens, pct(w),
               100 * masked);
  }
  Waste f = fixed(maxb), fl = longest(maxb, static_cast<int>(max_tokens / maxb));
  fmt::print("| fixed padding to {} | {} | {:.2f}% | {:.2f}% |\n", maxb, maxb, pct(f), pct(f));
  fmt::print("| pad to longest of {} docs | varies | {:.2f}% | {:.2f}% |\n", max_tokens / maxb, pct(fl), pct(fl));
  Waste f2 = fixed(static_cast<uint64_t>(seq));
  fmt::print("| fixed padding to {} | {} | {:.2f}% | {:.2f}% |\n", seq, seq, pct(f2), pct(f2));
  fmt::print("(truncation: fixed/bucketed rows drop tokens past the row length; packed drops none)\n");

  // ---- fetch latency and data wait with a simulated step ----
  fmt::print("\nfetch latency, packed, seq {} batch {}, simulated step {} ms (busy), {} steps:\n", seq, batch, step_ms,
             steps);
  fmt::print("| prefetch threads | fetch P50 | P95 | P99 | max | data wait share |\n|---|---|---|---|---|---|\n");
  for (int th : {0, 1, threads}) {
    if (th == threads && threads == 1) continue;
    LoaderConfig c = base;
    c.prefetch_threads = th, c.latency_window = steps;
    Loader l;
    if (Status s = l.open(c); !s) { fmt::print(stderr, "{}\n", s.message()); return 1; }
    double wait = 0;
    auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) {
      l.next();
      wait += l.last_fetch_ms();
      simulated_step(step_ms);
    }
    double total = ms_since(t0);
    auto st = l.fetch_latency().stats();
    fmt::print("| {} | {:.4f} ms | {:.4f} ms | {:.4f} ms | {:.3f} ms | {:.4f}% |\n", th, st.p50, st.p95, st.p99, st.max,
               100 * wait / total);
  }
  if (!stream_input.empty()) {
    LoaderConfig c = base;
    c.sources = stream_input, c.stream_tokenizer = tokenizer, c.stream_threads = 1, c.latency_window = steps;
    StreamLoader l;
    if (Status s = l.open(c); !s) { fmt::print(stderr, "{}\n", s.message()); return 1; }
    double wait = 0;
    auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) {
      l.next();
      wait += l.last_wait_ms();
      simulated_step(step_ms);
    }
    double total = ms_since(t0);
    auto st = l.fetch_latency().stats();
    fmt::print("| streaming ({}; 1 tokenizer thread) | {:.4f} ms | {:.4f} ms | {:.4f} ms | {:.3f} ms | {:.4f}% |\n",
               stream_input, st.p50, st.p95, st.p99, st.max, 100 * wait / total);
  }
  // Raw build rate: batches/s with no step at all (the loader alone).
  {
    LoaderConfig c = base;
    c.prefetch_threads = 0;
    Loader l;
    if (Status s = l.open(c); !s) return 1;
    auto t0 = Clock::now();
    int n = 0;
    while (ms_since(t0) < 1000) l.next(), ++n;
    double ms = ms_since(t0);
    fmt::print("\nsynchronous build rate: {:.0f} batches/s ({:.1f} M tokens/s)\n", n / ms * 1000,
               n / ms * 1000 * seq * batch / 1e6);
  }
  return 0;
}
