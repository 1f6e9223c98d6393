// The planner's cost model (cost.hpp; the formulas in docs/plan.md).
#include "smelt/plan/cost.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "smelt/model/activations.hpp"
#include "smelt/model/params.hpp"
#include "smelt/model/shard.hpp"
#include "smelt/train/pipeline.hpp"

namespace smelt {

std::string Layout::name() const {
  return fmt::format("dp{}-tp{}-pp{}-z{}-rc{}-mb{}", dp, tp, pp, zero ? 1 : 0, recompute ? 1 : 0, micro);
}

Status layout_parse(const std::string& s, Layout& out) {
  Layout l;
  l.micro = 0;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find('-', i);
    if (j == std::string::npos) j = s.size();
    const std::string part = s.substr(i, j - i);
    size_t k = 0;
    while (k < part.size() && std::isalpha((unsigned char)part[k])) k++;
    const std::string key = part.substr(0, k), num = part.substr(k);
    char* end = nullptr;
    const long v = num.empty() ? -1 : std::strtol(num.c_str(), &end, 10);
    if (v < 0 || (end && *end))
      return Status::error(fmt::format("layout '{}': part '{}': expected a name and a number (dp2, tp1, pp2, z1, rc0, mb4)",
                                       s, part));
    if (key == "dp") l.dp = (int)v;
    else if (key == "tp") l.tp = (int)v;
    else if (key == "pp") l.pp = (int)v;
    else if (key == "z") l.zero = v != 0;
    else if (key == "rc") l.recompute = v != 0;
    else if (key == "mb") l.micro = (int)v;
    else
      return Status::error(fmt::format("layout '{}': unknown part '{}' (expected dp, tp, pp, z, rc, mb)", s, key));
    i = j + 1;
  }
  if (l.dp < 1 || l.tp < 1 || l.pp < 1) return Status::error(fmt::format("layout '{}': dp, tp and pp must be >= 1", s));
  out = l;
  return Status::ok();
}

double plan_gemm_rate(const ClusterSpec& c, int64_t rows, int64_t in, int64_t out, Precision p) {
  const GemmRate* best = nullptr;
  double best_d = 0;
  for (const GemmRate& g : c.gemm) {
    if (g.in != in || g.out != out || g.precision != p) continue;
    const double d = std::fabs(std::log((double)g.rows / (double)rows));
    if (!best || d < best_d) best = &g, best_d = d;
  }
  if (best) return best->gflops;
  const double rate = p == Precision::kBf16 ? c.bf16_gflops : c.fp32_gflops;
  return rate > 0 ? rate : std::max(c.fp32_gflops, c.bf16_gflops);
}

namespace {

constexpr double kMs = 1e3;

// Whether a group of `size` members `stride` ranks apart spans more than one node.
bool spans_nodes(const ClusterSpec& c, int size, int stride) {
  return c.nodes > 1 && (int64_t)size * stride > c.devices_per_node;
}

// How much slower a rank computes when `ranks_on_node` ranks share a CPU node: 1 alone, the
// measured shared_slowdown with every core busy (linear in between: the cores' shared caches,
// memory bandwidth and clock), and ranks x threads over cores times that beyond (time-sharing).
// 1 for accelerators (cores_per_node 0).
double oversub(const ClusterSpec& c, double ranks_on_node) {
  if (c.cores_per_node <= 0) return 1;
  const double busy = ranks_on_node * c.threads_per_rank, cores = c.cores_per_node;
  const double s = std::max(1.0, c.shared_slowdown);
  if (busy <= cores) return cores > 1 ? 1 + (s - 1) * (busy - 1) / (cores - 1) : 1;
  return busy / cores * s;
}

// Seconds of an all-reduce of `bytes` over `ranks`: the measured curve for that group size
// (scaled to this run's oversubscription from the measurement's), else a ring over the link.
double allreduce_s(const ClusterSpec& c, double bytes, int ranks, bool cross, double k_run) {
  if (ranks <= 1 || bytes <= 0) return 0;
  for (const CommCurve& cv : c.allreduce)
    if (cv.ranks == ranks && !cross) return cv.at(bytes) * k_run / oversub(c, ranks);
  const double bw = (cross ? c.inter_gb_s : c.intra_gb_s) * 1e9;
  const double lat = (cross ? c.inter_latency_us : c.intra_latency_us) * 1e-6;
  return 2.0 * (ranks - 1) / ranks * bytes / bw + 2.0 * (ranks - 1) * lat;
}

// What a collective of `ranks` waits for the slowest rank when each comes to it from `segment`
// seconds of compute: the measured sync curve for that group size; 0 without one (a cluster file
// that gives none takes its collectives as entered together).
double sync_wait_s(const ClusterSpec& c, int ranks, double segment) {
  for (const CommCurve& w : c.sync)
    if (w.ranks == ranks) return std::max(0.0, w.at(segment));
  return 0;
}

double p2p_s(const ClusterSpec& c, double bytes, bool cross, double k_run) {
  if (!c.p2p.bytes.empty() && !cross) return c.p2p.at(bytes) * k_run / oversub(c, 2);
  const double bw = (cross ? c.inter_gb_s : c.intra_gb_s) * 1e9;
  return (cross ? c.inter_latency_us : c.intra_latency_us) * 1e-6 + bytes / bw;
}

// One stage's costs per micro-batch (seconds): forward and backward with their TP all-reduces,
// and the parts for the breakdown.
struct StageCost {
  double fwd = 0, bwd = 0, gemm = 0, attention = 0, elementwise = 0, tp = 0, tp_wait = 0;
  double send = 0;  // one activation (or gradient) message to the neighbour
  int64_t params = 0;
};

StageCost stage_cost(const PlanRequest& r, const ClusterSpec& c, const Layout& l, const ModelConfig& m,
                     const ModelShard& s, double k) {
  const ShardDims d = shard_dims(m, s);
  const int T = r.seq;
  const int64_t Np = (int64_t)l.micro * T;
  StageCost sc;
  // GEMMs: forward 2 Np in out, backward twice that; the rate is measured for the pair.
  double g_f = 0, g_b = 0, g_layer_f = 0;
  for (const LinearShape& g : linear_shapes(d)) {
    if (g.count == 0) continue;
    const double secs = 6.0 * Np * g.IC * g.OC * g.count / (plan_gemm_rate(c, Np, g.IC, g.OC, r.precision) * 1e9);
    g_f += secs / 3;
    g_b += 2 * secs / 3;
    if (g.in_layers) g_layer_f += secs / 3;  // recomputed with the layers
  }
  // Attention, as train_flops_per_token counts it (12 L A T per token, a third forward).
  const double att = 12.0 * d.L * Np * T * d.A() / (c.attention_gflops * 1e9);
  // Everything else: 3 x 4 bytes per activation float of the size table (written forward, read
  // and its gradient written backward), at the cluster's elementwise rate.
  const int64_t floats = activation_floats(d, false, l.micro, T);
  ShardDims no_layers = d;
  no_layers.L = 0;
  const int64_t layer_floats = floats - activation_floats(no_layers, false, l.micro, T);
  const double ew = 12.0 * floats / (c.elementwise_gb_s * 1e9);
  const double ew_layer_f = 4.0 * layer_floats / (c.elementwise_gb_s * 1e9);
  // Recompute: the layers' forward again inside backward.
  const double rc = l.recompute ? g_layer_f + att / 3 + ew_layer_f : 0;
  sc.gemm = (g_f + g_b + (l.recompute ? g_layer_f : 0)) * k;
  sc.attention = (att + (l.recompute ? att / 3 : 0)) * k;
  sc.elementwise = (ew + (l.recompute ? ew_layer_f : 0)) * k;
  // TP: (rows, d_model) all-reduces: the embedding's, 2 per layer forward (attention and MLP
  // outputs) and 2 backward (their inputs' gradients), the head's input gradient; the
  // vocabulary-parallel cross-entropy's max and (sum, target) rows. Each also waits for the
  // slowest rank of its group: the sync curve at the compute between two of them.
  double tp_f = 0, tp_b = 0;
  if (l.tp > 1) {
    const bool cross = spans_nodes(c, l.tp, 1);
    const double msg = allreduce_s(c, 4.0 * Np * d.C, l.tp, cross, k);
    const int rows_f = (d.embed ? 1 : 0) + 2 * d.L;  // (rows, d_model) messages forward
    const int n_b = 2 * d.L + (d.head ? 1 : 0) + (l.recompute ? 2 * d.L : 0);
    tp_f = rows_f * msg;
    tp_b = n_b * msg;
    if (d.head) tp_f += allreduce_s(c, 4.0 * Np, l.tp, cross, k) + allreduce_s(c, 8.0 * Np, l.tp, cross, k);
    const int n_f = rows_f + (d.head ? 2 : 0);
    const double compute = sc.gemm + sc.attention + sc.elementwise;
    const double wait = sync_wait_s(c, l.tp, compute / (n_f + n_b));
    tp_f += n_f * wait;
    tp_b += n_b * wait;
    sc.tp_wait = (n_f + n_b) * wait;
  }
  sc.tp = tp_f + tp_b;
  sc.fwd = (g_f + att / 3 + ew / 3) * k + tp_f;
  sc.bwd = (g_b + 2 * att / 3 + 2 * ew / 3 + rc) * k + tp_b;
  if (l.pp > 1) sc.send = p2p_s(c, 4.0 * Np * d.C, spans_nodes(c, 2, l.dp * l.tp), k);
  sc.params = param_layout(m, s).total;
  return sc;
}

// The 1F1B step of P stages with M micro-batches, each stage running its op list in order, a
// forward waiting for the previous stage's (plus the message), a backward for the next stage's.
// Returns the makespan; busy[s] the time stage s computes.
double simulate_1f1b(const std::vector<StageCost>& st, int M, std::vector<double>& busy) {
  const int P = (int)st.size();
  std::vector<std::vector<PipeOp>> ops(P);
  for (int s = 0; s < P; s++) ops[s] = pipeline_1f1b(P, s, M);
  std::vector<size_t> next(P, 0);
  std::vector<double> clock(P, 0.0);
  std::vector<std::vector<double>> fend(P, std::vector<double>(M, -1)), bend(P, std::vector<double>(M, -1));
  busy.assign(P, 0.0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < P; s++) {
      while (next[s] < ops[s].size()) {
        const PipeOp op = ops[s][next[s]];
        double ready = 0;
        if (op.forward) {
          if (s > 0) {
            if (fend[s - 1][op.micro] < 0) break;
            ready = fend[s - 1][op.micro] + st[s - 1].send;
          }
        } else if (s + 1 < P) {
          if (bend[s + 1][op.micro] < 0) break;
          ready = bend[s + 1][op.micro] + st[s + 1].send;
        }
        const double dur = op.forward ? st[s].fwd : st[s].bwd;
        const double start = std::max(clock[s], ready);
        clock[s] = start + dur;
        busy[s] += dur;
        (op.forward ? fend : bend)[s][op.micro] = clock[s];
        next[s]++;
        progress = true;
      }
    }
  }
  return *std::max_element(clock.begin(), clock.end());
}

std::string gb(double bytes) { return fmt::format("{:.2f} GB", bytes / 1e9); }

}  // namespace

Prediction plan_predict(const PlanRequest& r, const ClusterSpec& c, const Layout& l) {
  Prediction p;
  p.layout = l;
  p.memory_limit = (int64_t)(c.memory_gb * 1e9);
  const int world = l.dp * l.tp * l.pp;
  ModelConfig m = r.model;
  m.recompute = l.recompute;
  auto reject = [&](std::string why) {
    p.fits = false;
    p.reason = std::move(why);
    return p;
  };
  if (l.micro < 1 || l.accum < 1) return reject("micro-batch rows and count must be >= 1");
  if ((int64_t)l.dp * l.micro * l.accum != r.global_batch)
    return reject(fmt::format("dp {} x micro-batch {} x {} micro-batches = {} sequences, not the global batch {}", l.dp,
                              l.micro, l.accum, (int64_t)l.dp * l.micro * l.accum, r.global_batch));
  if (l.zero && l.dp < 2) return reject("ZeRO-1 needs dp >= 2");
  if (r.seq > m.max_seq_len) return reject(fmt::format("seq {} > the model's max_seq_len {}", r.seq, m.max_seq_len));
  std::vector<int> bounds;
  if (Status s = stage_bounds(m.n_layers, l.pp, {}, bounds); !s) return reject(s.message());
  for (int st = 0; st < l.pp; st++)
    if (Status s = shard_validate(m, model_shard(l.tp, 0, l.pp, st, bounds)); !s) return reject(s.message());

  // Memory: every stage's largest rank (TP rank 0 holds the replicated norms' ownership; sizes are
  // the same on every TP rank but for an uneven vocabulary split, where rank 0 has the most).
  RunMemoryInput in;
  in.B = l.micro, in.T = r.seq, in.dp = l.dp, in.grad_accum = l.accum, in.zero = l.zero;
  in.dist = r.dist, in.checkpoints = r.save_every > 0, in.save_at_end = r.save_at_end;
  in.precision = r.precision, in.threads = c.threads_per_rank;
  const double mp_mb = c.mp_process_mb > 0 ? c.mp_process_mb : c.mpi_process_mb;
  p.memory.process_bytes = (int64_t)((world == 1 ? c.process_mb : l.tp * l.pp > 1 ? mp_mb : c.mpi_process_mb) * 1e6);
  for (int st = 0; st < l.pp; st++) {
    RunMemory rm = run_memory_plan(m, model_shard(l.tp, 0, l.pp, st, bounds), in);
    if (st == 0 || rm.total() > p.memory.run.total()) p.memory.run = rm, p.memory.stage = st;
  }

  // Time. Ranks sharing a CPU node slow each other down (oversub). A pipeline stage waiting for
  // its neighbour yields its core, so under 1F1B only the busy ranks share: the sharing is found
  // from the schedule's busy fraction (a few rounds of simulate, share, simulate).
  const int on_node = std::min(world, c.devices_per_node);
  double k = oversub(c, on_node);
  std::vector<StageCost> stages;
  std::vector<double> busy;
  // The last round's stages, schedule and k are the prediction's.
  double makespan = 0;
  const int rounds = l.pp > 1 && c.cores_per_node > 0 ? 4 : 1;
  for (int round = 0; round < rounds; round++) {
    stages.clear();
    for (int st = 0; st < l.pp; st++) stages.push_back(stage_cost(r, c, l, m, model_shard(l.tp, 0, l.pp, st, bounds), k));
    if (l.pp == 1) break;
    makespan = simulate_1f1b(stages, l.accum, busy);
    if (round + 1 == rounds) break;
    double frac = 0;
    for (double b : busy) frac += b / makespan / l.pp;
    k = oversub(c, on_node * frac);
  }
  TimeEstimate& t = p.time;
  t.oversubscription = k;
  int busiest = 0;
  if (l.pp > 1) {
    busiest = (int)(std::max_element(busy.begin(), busy.end()) - busy.begin());
    t.bubble_ms = (makespan - busy[busiest]) * kMs;
    const int sends = (busiest > 0 ? 1 : 0) + (busiest + 1 < l.pp ? 1 : 0);
    t.pp_send_ms = sends * l.accum * stages[busiest].send * kMs;
  } else {
    makespan = l.accum * (stages[0].fwd + stages[0].bwd);
  }
  const StageCost& b = stages[busiest];
  t.gemm_ms = l.accum * b.gemm * kMs;
  t.attention_ms = l.accum * b.attention * kMs;
  t.elementwise_ms = l.accum * b.elementwise * kMs;
  t.tp_ms = l.accum * b.tp * kMs;
  t.tp_wait_ms = l.accum * b.tp_wait * kMs;
  // Optimizer: AdamW reads the parameter, its gradient and two moments and writes three (28 bytes
  // per owned parameter) and the norm reads the owned gradient (32 in all); zeroing writes every
  // gradient; the micro-batches' sum reads and writes one per parameter each micro-batch.
  double opt_bytes = 0;
  for (int st = 0; st < l.pp; st++) {
    const double n = (double)stages[st].params, owned = l.zero ? n / l.dp : n;
    opt_bytes = std::max(opt_bytes, 32 * owned + 4 * n + (l.accum > 1 ? 8.0 * n * l.accum : 0));
  }
  t.optimizer_ms = opt_bytes / (c.elementwise_gb_s * 1e9) * k * kMs;
  // DP: the gradient over the replicas (ZeRO-1: reduce-scatter, then the weights' all-gather after
  // the update, the same bytes in all); overlapped with backward only without TP and PP, where the
  // embedding's bucket (the last to be final) is what remains.
  if (l.dp > 1) {
    const bool cross = spans_nodes(c, l.dp, l.tp);
    const double n = (double)b.params;
    const double full = allreduce_s(c, 4 * n, l.dp, cross, k);
    t.dp_ms = full * kMs;
    const bool overlapped = r.dist.overlap && l.tp == 1 && l.pp == 1;
    double exposed = full;
    if (overlapped) {
      const double sum = l.zero ? full / 2 : full, gather = l.zero ? full / 2 : 0;
      const double last = allreduce_s(c, 4.0 * m.vocab_size * m.d_model, l.dp, cross, k) * (l.zero ? 0.5 : 1);
      exposed = std::max(last, sum - stages[0].bwd) + gather;
    }
    t.dp_exposed_ms = exposed * kMs;
  }
  double step = makespan * kMs + t.optimizer_ms + t.dp_exposed_ms;
  if (r.save_every > 0) {
    // The staging copy of this rank's part (memcpy at the elementwise rate) every save; the write
    // stalls the next save only when it takes longer than the interval.
    const double part = p.memory.run.staging_bytes / 2.0;
    const double copy = part / (c.elementwise_gb_s * 1e9) * kMs;
    const double write = c.disk_write_mb_s > 0 ? part / (c.disk_write_mb_s * 1e6) * kMs : 0;
    const double interval = step * r.save_every;
    t.ckpt_ms = (copy + std::max(0.0, write - interval)) / r.save_every;
    step += t.ckpt_ms;
  }
  t.step_ms = step;
  const std::vector<std::pair<const char*, double>> parts = {
      {"gemm", t.gemm_ms}, {"attention", t.attention_ms}, {"elementwise", t.elementwise_ms},
      {"optimizer", t.optimizer_ms}, {"tp", t.tp_ms}, {"pp bubble", t.bubble_ms}, {"pp sends", t.pp_send_ms},
      {"dp", t.dp_exposed_ms}, {"checkpoint", t.ckpt_ms}};
  t.dominant = std::max_element(parts.begin(), parts.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  p.tokens_per_s = (double)r.global_batch * r.seq / (step / kMs);
  const double rate = r.precision == Precision::kBf16 && c.bf16_gflops > 0 ? c.bf16_gflops : c.fp32_gflops;
  p.mfu = rate > 0 ? p.tokens_per_s * train_flops_per_token(r.model, r.seq) / (world * rate * 1e9) : 0;
  p.fits = p.memory.total() <= p.memory_limit;
  if (!p.fits)
    p.reason = fmt::format("does not fit: {} per rank (stage {}) > {} per device, over by {} ({:.0f}%)",
                           gb((double)p.memory.total()), p.memory.stage, gb((double)p.memory_limit),
                           gb((double)(p.memory.total() - p.memory_limit)),
                           100.0 * (p.memory.total() - p.memory_limit) / p.memory_limit);
  return p;
}

std::vector<Prediction> plan_search(const PlanRequest& r, const ClusterSpec& c) {
  const int world = r.ranks > 0 ? r.ranks : c.devices();
  std::vector<Prediction> fit, rejected;
  for (int tp = 1; tp <= world; tp++) {
    if (world % tp) continue;
    for (int pp = 1; pp * tp <= world; pp++) {
      if ((world / tp) % pp) continue;
      const int dp = world / tp / pp;
      Layout base;
      base.dp = dp, base.tp = tp, base.pp = pp;
      if (r.global_batch % dp) {
        Prediction p;
        p.layout = base;
        p.layout.micro = 0;
        p.reason = fmt::format("the global batch {} is not divisible by dp {}", r.global_batch, dp);
        rejected.push_back(p);
        continue;
      }
      const int64_t per_rank = r.global_batch / dp;
      std::vector<int> micros = r.micro_batches;
      if (micros.empty())
        for (int64_t b = 1; b <= per_rank; b++)
          if (per_rank % b == 0) micros.push_back((int)b);
      bool structural_reject = false;
      for (int mb : micros) {
        if (mb < 1 || per_rank % mb) continue;
        for (int z = 0; z <= (dp > 1 ? 1 : 0); z++)
          for (int rc = 0; rc <= 1; rc++) {
            Layout l = base;
            l.zero = z, l.recompute = rc, l.micro = mb, l.accum = (int)(per_rank / mb);
            Prediction p = plan_predict(r, c, l);
            if (p.fits) fit.push_back(std::move(p));
            else if (p.memory.total() > 0) rejected.push_back(std::move(p));
            else if (!structural_reject) {  // a layout the model does not allow: once, not per micro-batch
              structural_reject = true;
              p.layout.micro = 0;
              rejected.push_back(std::move(p));
            }
          }
        if (structural_reject) break;
      }
    }
  }
  std::stable_sort(fit.begin(), fit.end(), [](const Prediction& a, const Prediction& b) {
    return a.time.step_ms < b.time.step_ms;
  });
  std::stable_sort(rejected.begin(), rejected.end(), [](const Prediction& a, const Prediction& b) {
    return a.memory.total() < b.memory.total();
  });
  fit.insert(fit.end(), rejected.begin(), rejected.end());
  return fit;
}

}  // namespace smelt
