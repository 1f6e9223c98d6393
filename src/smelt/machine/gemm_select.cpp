// The GEMM back-end measurement and its per-machine cache (gemm_select.hpp).
#include "smelt/machine/gemm_select.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <vector>

#include <fmt/format.h>
#include <omp.h>
#include <nlohmann/json.hpp>

#include "smelt/common/clock.hpp"
#include "smelt/common/files.hpp"
#include "smelt/hw/cpu_info.hpp"
#include "smelt/model/shard.hpp"

namespace smelt {

namespace fs = std::filesystem;

namespace {
using Linear = LinearShape;

// The whole model's linear layers (no shard: the choice is made at the model's own shapes).
std::vector<Linear> model_linears(const ModelConfig& c) { return linear_shapes(shard_dims(c, ModelShard{})); }

int measure_rows(int B, int T) { return std::max(1, std::min(B * T, 512)); }

std::string cache_dir() {
  if (const char* d = std::getenv("SMELT_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/smelt";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/smelt";
  return "";
}

std::string cache_key(const ModelConfig& c, int rows, Precision p, const std::string& engine, int threads) {
  const CpuInfo& cpu = cpu_info();
  std::string shapes;
  for (const Linear& l : model_linears(c)) shapes += fmt::format("{}x{},", l.IC, l.OC);
  return fmt::format("{} | {} | rows {} | {}| {} | {} | threads {}", cpu.model, cpu.flags(), rows, shapes,
                     precision_name(p), engine, threads);
}

// The lock and the JSON file beside it; measurement happens with the lock held, so two runs
// starting at once measure one after the other and the second reads the first's numbers.
class RateCache {
 public:
  RateCache() {
    dir_ = cache_dir();
    if (dir_.empty()) return;
    std::error_code ec;
    fs::create_directories(dir_, ec);
    fd_ = ::open((dir_ + "/gemm-rates.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) flock(fd_, LOCK_EX);
    std::string text;
    if (files_read_small(dir_ + "/gemm-rates.json", text)) {
      try {
        j_ = nlohmann::json::parse(text);
      } catch (...) {
        j_ = nlohmann::json::object();  // a damaged cache is measured again
      }
    }
    if (!j_.is_object()) j_ = nlohmann::json::object();
  }
  ~RateCache() {
    if (dirty_ && !dir_.empty()) (void)files_write_atomic(dir_ + "/gemm-rates.json", j_.dump(1) + "\n");
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  bool get(const std::string& k, double& v) const {
    auto it = j_.find(k);
    if (it == j_.end() || !it->is_number()) return false;
    v = it->get<double>();
    return v > 0;
  }
  void put(const std::string& k, double v) {
    j_[k] = v;
    dirty_ = true;
  }

 private:
  std::string dir_;
  int fd_ = -1;
  nlohmann::json j_;
  bool dirty_ = false;
};

// Whether some linear layer product runs on the packed kernel (the table gemm_select set): the
// run's own bf16 rate is then cached under a key of its own.
bool g_bf16_mixed = false;

// BLIS with the library and kernels it runs (BLIS_ARCH_TYPE can change them between runs).
std::string engine_name(GemmBackend b, Precision p) {
  if (p == Precision::kBf16)
    return !gemm_bf16_native() ? "portable-bf16" : g_bf16_mixed ? "onednn-bf16+packed" : "onednn-bf16";
  if (b == GemmBackend::kBlis) return "blis (" + gemm_blis_library() + ")";
  return gemm_backend_name(b);
}

// The cached rate, or a fresh measurement (then cached). best_of: measure again even when cached
// and keep the higher of the two: the cache holds the best rate this machine has shown for the
// shapes (a measurement on a busy machine comes out low, and must not become the ceiling). The
// best-of rates have keys of their own: a run at 1 thread in fp32 measures what the back-end
// choice measured once, and raising that entry would let a later run choose differently.
double rate(RateCache& cache, const ModelConfig& c, int B, int T, Precision p, GemmBackend b, int threads,
            bool& measured, bool best_of = false, double* fresh = nullptr) {
  const std::string k =
      cache_key(c, measure_rows(B, T), p, engine_name(b, p), threads) + (best_of ? " | best of the runs" : "");
  double v = 0;
  const bool have = cache.get(k, v);
  if (have && !best_of) return v;
  const GemmBackend keep = gemm_backend();
  gemm_set_backend(b);
  const double now = gemm_measure_model(c, B, T, p, threads);
  gemm_set_backend(keep);
  if (fresh) *fresh = now;
  if (!have || now > v) cache.put(k, now);
  measured = measured || !have;
  return std::max(v, now);
}
}  // namespace

std::string GemmChoice::report() const {
  std::string fp32 = openblas_gflops > 0 && onednn_gflops > 0
                         ? fmt::format("fp32 1 thread: openblas {:.1f}, onednn {:.1f}{} GFLOP/s", openblas_gflops,
                                       onednn_gflops, blis_gflops > 0 ? fmt::format(", blis {:.1f}", blis_gflops) : "")
                         : std::string("fp32 rates not measured");
  if (bf16_products > 0)
    fp32 += fmt::format("; bf16 1 thread: onednn {:.1f}, packed {:.1f}, per product the faster {:.1f} GFLOP/s",
                        bf16_onednn_gflops, bf16_packed_gflops, bf16_chosen_gflops);
  return fmt::format("GEMMs on {} ({}, {}); the model's GEMMs at {} thread{}: {:.1f} GFLOP/s; {}", engine, how,
                     precision_name(precision), threads, threads == 1 ? "" : "s", gflops, fp32);
}

std::vector<double> interleaved_seconds(size_t n, const std::function<void(size_t)>& call, double seconds) {
  std::vector<double> secs(n, 0.0);
  for (size_t i = 0; i < n; i++) call(i);
  const double t_end = now_s() + seconds;
  int passes = 0;
  do {
    for (size_t i = 0; i < n; i++) {
      const double t0 = now_s();
      call(i);
      secs[i] += now_s() - t0;
    }
    passes++;
  } while (now_s() < t_end || passes < 2);
  for (double& t : secs) t /= passes;
  return secs;
}

namespace {
struct GemmScratch {
  int64_t w = 1, x = 1, y = 1;  // floats: the largest weight, input and output
};
GemmScratch gemm_scratch(const std::vector<GemmShape>& shapes) {
  GemmScratch s;
  for (const GemmShape& g : shapes)
    s.w = std::max(s.w, g.in * g.out), s.x = std::max(s.x, g.rows * g.in), s.y = std::max(s.y, g.rows * g.out);
  return s;
}
}  // namespace

int64_t gemm_measure_bytes(const std::vector<GemmShape>& shapes, Precision precision) {
  const GemmScratch s = gemm_scratch(shapes);
  const int64_t fp32 = 4 * (2 * s.w + 2 * s.x + 2 * s.y);
  return precision == Precision::kBf16 ? fp32 + 2 * (s.w + s.x + s.y) : fp32;
}

int64_t gemm_select_bytes(const ModelConfig& c, int B, int T, Precision precision) {
  const int N = measure_rows(B, T);
  std::vector<GemmShape> shapes;
  for (const Linear& l : model_linears(c)) shapes.push_back({N, l.IC, l.OC});
  // the fp32 back-end choice and, under bf16, the run's own rate at bf16
  return std::max(gemm_measure_bytes(shapes, Precision::kFp32), gemm_measure_bytes(shapes, precision));
}

std::vector<double> gemm_measure_shapes(const std::vector<GemmShape>& shapes, Precision precision, int threads,
                                        double seconds) {
  const GemmScratch sz = gemm_scratch(shapes);
  // One weight, one input and one output gradient of the largest size, reused by every shape:
  // rates do not depend on the values, only on the shapes.
  std::vector<float> w((size_t)sz.w), x((size_t)sz.x), dy((size_t)sz.y), y((size_t)sz.y);
  std::vector<float> dx((size_t)sz.x), dw((size_t)sz.w);
  for (size_t i = 0; i < w.size(); i++) w[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
  for (size_t i = 0; i < x.size(); i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  for (size_t i = 0; i < dy.size(); i++) dy[i] = (float)((i * 7919u) % 1000) * 1e-3f - 0.5f;
  std::vector<uint16_t> w16, x16, d16;
  const bool bf16 = precision == Precision::kBf16;
  if (bf16) {
    w16.resize(w.size()), x16.resize(x.size()), d16.resize(dy.size());
    bf16_from_f32(w16.data(), w.data(), (int64_t)w.size());
  }
  kernels_set_threads(threads);
  auto run = [&](const GemmShape& g) {
    const int N = (int)g.rows, IC = (int)g.in, OC = (int)g.out;
    if (bf16) {
      matmul_forward_bf16(y.data(), x16.data(), x.data(), w16.data(), N, IC, OC);
      matmul_backward_bf16(dx.data(), dw.data(), d16.data(), x16.data(), dy.data(), x.data(), w16.data(), N, IC, OC);
    } else {
      matmul_forward(y.data(), x.data(), w.data(), N, IC, OC);
      matmul_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, IC, OC);
    }
  };
  return interleaved_seconds(shapes.size(), [&](size_t i) { run(shapes[i]); }, seconds);
}

double gemm_measure_model(const ModelConfig& c, int B, int T, Precision precision, int threads, double seconds) {
  const int N = measure_rows(B, T);
  const std::vector<Linear> ls = model_linears(c);
  std::vector<GemmShape> shapes;
  for (const Linear& l : ls) shapes.push_back({N, l.IC, l.OC});
  // Weighted by how often the model has each layer kind: the rate is the model's FLOPs over the
  // time its layers would take.
  const std::vector<double> secs = gemm_measure_shapes(shapes, precision, threads, seconds);
  double flop = 0, time = 0;
  for (size_t i = 0; i < ls.size(); i++) {
    flop += 6.0 * N * ls[i].IC * ls[i].OC * ls[i].count;
    time += secs[i] * ls[i].count;
  }
  return flop / time / 1e9;
}

std::vector<double> gemm_bf16_product_seconds(const std::vector<GemmShape>& shapes, Bf16Engine e, double seconds,
                                              int threads) {
  const GemmScratch sz = gemm_scratch(shapes);
  std::vector<float> f((size_t)std::max({sz.w, sz.x, sz.y}));
  for (size_t i = 0; i < f.size(); i++) f[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
  std::vector<uint16_t> w16((size_t)sz.w), x16((size_t)sz.x), d16((size_t)sz.y);
  bf16_from_f32(w16.data(), f.data(), sz.w);
  bf16_from_f32(x16.data(), f.data(), sz.x);
  bf16_from_f32(d16.data(), f.data(), sz.y);
  std::vector<float> y((size_t)sz.y), dx((size_t)sz.x), dw((size_t)sz.w);
  const int keep = omp_get_max_threads();
  kernels_set_threads(threads);
  auto run = [&](const GemmShape& g, int p) {
    const int N = (int)g.rows, IC = (int)g.in, OC = (int)g.out;
    if (p == (int)LinearProduct::kForward)
      gemm_bf16_on(e, false, true, N, OC, IC, x16.data(), IC, w16.data(), IC, 0.0f, y.data(), OC);
    else if (p == (int)LinearProduct::kDinp)
      gemm_bf16_on(e, false, false, N, IC, OC, d16.data(), OC, w16.data(), IC, 0.0f, dx.data(), IC);
    else gemm_bf16_on(e, true, false, OC, IC, N, d16.data(), OC, x16.data(), IC, 1.0f, dw.data(), IC);
  };
  const std::vector<double> secs =
      interleaved_seconds(3 * shapes.size(), [&](size_t i) { run(shapes[i / 3], (int)(i % 3)); }, seconds);
  kernels_set_threads(keep);
  return secs;
}

namespace {
const char* product_name(int p) { return p == 0 ? "forward" : p == 1 ? "dinp" : "dweight"; }

// The 1-thread rate (GFLOP/s) of every linear layer product on engine e: from the cache, or all
// measured at once (then cached).
std::vector<double> bf16_product_rates(RateCache& cache, const ModelConfig& c, int N, Bf16Engine e,
                                       bool& measured) {
  const std::vector<Linear> ls = model_linears(c);
  std::vector<std::string> keys;
  std::vector<double> rates;
  bool all = true;
  for (const Linear& l : ls)
    for (int p = 0; p < 3; p++) {
      const std::string what = fmt::format("bf16 {} {} {}x{}", bf16_engine_name(e), product_name(p), l.IC, l.OC);
      keys.push_back(cache_key(c, N, Precision::kBf16, what.c_str(), 1));
      double v = 0;
      all = all && cache.get(keys.back(), v);
      rates.push_back(v);
    }
  if (all) return rates;
  std::vector<GemmShape> shapes;
  for (const Linear& l : ls) shapes.push_back({N, l.IC, l.OC});
  const std::vector<double> secs = gemm_bf16_product_seconds(shapes, e);
  for (size_t i = 0; i < secs.size(); i++) {
    const Linear& l = ls[i / 3];
    rates[i] = 2.0 * N * l.IC * l.OC / secs[i] / 1e9;
    cache.put(keys[i], rates[i]);
  }
  measured = true;
  return rates;
}

// Each linear layer product on the faster engine at 1 thread; out's bf16 fields filled.
void choose_bf16_engines(RateCache& cache, const ModelConfig& c, int B, int T, GemmChoice& out, bool& measured) {
  gemm_bf16_clear_engines();
  g_bf16_mixed = false;
  if (!gemm_bf16_native() || !gemm_bf16_packed_available()) return;
  const int N = measure_rows(B, T);
  const std::vector<Linear> ls = model_linears(c);
  const std::vector<double> one = bf16_product_rates(cache, c, N, Bf16Engine::kOneDnn, measured);
  const std::vector<double> own = bf16_product_rates(cache, c, N, Bf16Engine::kPacked, measured);
  double flop = 0, t_one = 0, t_own = 0, t_best = 0;
  for (size_t i = 0; i < one.size(); i++) {
    const Linear& l = ls[i / 3];
    const double f = 2.0 * N * l.IC * l.OC * l.count;
    // a forward or dinp at fewer rows than kBf16PackedMinRows never runs packed (kernels.hpp)
    const bool packed = own[i] > one[i] && (i % 3 == (size_t)LinearProduct::kDweight || N >= kBf16PackedMinRows);
    gemm_bf16_set_engine(l.IC, l.OC, (LinearProduct)(i % 3), packed ? Bf16Engine::kPacked : Bf16Engine::kOneDnn);
    flop += f, t_one += f / one[i], t_own += f / own[i], t_best += f / (packed ? own[i] : one[i]);
    out.bf16_products++;
  }
  // A layer shape the model has twice (the same in and out) is one table entry: the later choice.
  for (size_t i = 0; i < one.size(); i++)
    out.bf16_packed += gemm_bf16_engine(ls[i / 3].IC, ls[i / 3].OC, (LinearProduct)(i % 3)) == Bf16Engine::kPacked;
  out.bf16_onednn_gflops = flop / t_one, out.bf16_packed_gflops = flop / t_own, out.bf16_chosen_gflops = flop / t_best;
  g_bf16_mixed = out.bf16_packed > 0;
}
}  // namespace

Status gemm_select(const std::string& want, const ModelConfig& c, int B, int T, Precision precision, int threads,
                   GemmChoice& out) {
  out = GemmChoice{};
  out.precision = precision;
  out.threads = threads;
  // a configured back end, by the name gemm_backend_name gives it
  GemmBackend configured = GemmBackend::kOpenBlas;
  bool named = false;
  for (GemmBackend b : {GemmBackend::kOpenBlas, GemmBackend::kOneDnn, GemmBackend::kBlis})
    if (want == gemm_backend_name(b)) configured = b, named = true;
  if (want != "auto" && !named)
    return Status::error(
        fmt::format("[train] gemm = \"{}\": expected \"auto\", \"openblas\", \"onednn\" or \"blis\"", want));
  if (named && !gemm_backend_available(configured))
    return Status::error("[train] gemm = \"blis\": no BLIS library on this machine (apt-get install libblis4-serial)");
  RateCache cache;
  bool measured = false;
  if (want == "auto") {
    out.openblas_gflops = rate(cache, c, B, T, Precision::kFp32, GemmBackend::kOpenBlas, 1, measured);
    out.onednn_gflops = rate(cache, c, B, T, Precision::kFp32, GemmBackend::kOneDnn, 1, measured);
    if (gemm_backend_available(GemmBackend::kBlis))
      out.blis_gflops = rate(cache, c, B, T, Precision::kFp32, GemmBackend::kBlis, 1, measured);
    out.backend = out.onednn_gflops > out.openblas_gflops ? GemmBackend::kOneDnn : GemmBackend::kOpenBlas;
    if (out.blis_gflops > std::max(out.openblas_gflops, out.onednn_gflops)) out.backend = GemmBackend::kBlis;
    out.how = measured ? "measured" : "cached";
  } else {
    out.backend = configured;
    out.how = "configured";
  }
  gemm_set_backend(out.backend);
  gemm_bf16_clear_engines();
  g_bf16_mixed = false;
  if (precision == Precision::kBf16 && want == "auto") {
    bool m = false;
    choose_bf16_engines(cache, c, B, T, out, m);
    if (m) out.how = "measured";
  }
  out.engine = precision == Precision::kBf16 ? (gemm_bf16_native() ? gemm_bf16_isa() : std::string("portable bf16 on ") +
                                                                                          gemm_backend_name(out.backend))
                                             : gemm_backend_name(out.backend);
  if (out.bf16_packed > 0)
    out.engine += fmt::format(" + packed ({} of {} products)", out.bf16_packed, out.bf16_products);
  bool fresh = false;
  out.gflops = rate(cache, c, B, T, precision, out.backend, threads, fresh, /*best_of=*/true);
  return Status::ok();
}

double gemm_measure_again(const ModelConfig& c, int B, int T, GemmChoice& g) {
  RateCache cache;
  bool measured = false;
  double now = 0;
  const double best = rate(cache, c, B, T, g.precision, g.backend, g.threads, measured, /*best_of=*/true, &now);
  g.gflops = std::max(g.gflops, best);
  return now;
}

}  // namespace smelt
