// LoRA: configuration, layout, initial values, dropout masks and one target's products.
#include "smelt/model/lora.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/kernels/decode_linear.hpp"
#include "smelt/kernels/kernels.hpp"

namespace smelt {

namespace {
constexpr const char* kTargetNames[kLoraTargets] = {"q", "k", "v", "o", "gate", "up", "down"};
constexpr const char* kModuleNames[kLoraTargets] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                    "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                    "mlp.down_proj"};
constexpr int kTile = 64;  // rows (or columns) per task: fixed, so the bits do not depend on threads

uint64_t mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// f(begin, end) over [0, n) in kTile pieces, on up to `threads` threads.
template <class F>
void tiled(int n, int threads, F&& f) {
  const int tiles = (n + kTile - 1) / kTile;
#pragma omp parallel for schedule(dynamic, 1) num_threads(std::max(1, threads))
  for (int t = 0; t < tiles; t++) f(t * kTile, std::min(n, (t + 1) * kTile));
}

// x with the dropout mask applied, into xd (rows [r0, r1)).
void drop_rows(const LoraOp& op, const float* x, float* xd, int r0, int r1) {
  for (int r = r0; r < r1; r++)
    for (int i = 0; i < op.in; i++) {
      const int64_t k = (int64_t)r * op.in + i;
      xd[k] = x[k] * lora_keep(op.seed, op.counter, op.layer, op.target, r, i, op.p);
    }
}
}  // namespace

const char* lora_target_name(int t) { return t >= 0 && t < kLoraTargets ? kTargetNames[t] : ""; }
const char* lora_module_name(int t) { return t >= 0 && t < kLoraTargets ? kModuleNames[t] : ""; }

bool lora_base_compact(const LoraConfig& l, const ParamTensor& t) {
  if (!l.enabled() || l.base_dtype == "fp32" || t.cols == 1 || t.name.rfind("model.layers.", 0) != 0) return false;
  return l.base_dtype == "bf16" || t.cols % kQ8Block == 0;
}

Status lora_config_validate(const LoraConfig& l) {
  if (l.rank < 1) return Status::error(fmt::format("[lora] rank = {}: must be >= 1", l.rank));
  if (!(l.alpha > 0)) return Status::error(fmt::format("[lora] alpha = {}: must be > 0", l.alpha));
  if (!(l.dropout >= 0 && l.dropout < 1)) return Status::error(fmt::format("[lora] dropout = {}: must be in [0, 1)", l.dropout));
  if (l.base_dtype != "fp32" && l.base_dtype != "bf16" && l.base_dtype != "q8_0")
    return Status::error(fmt::format("[lora] base_dtype = \"{}\": expected fp32, bf16 or q8_0", l.base_dtype));
  if (l.targets.empty()) return Status::error("[lora] targets is empty: name at least one of q, k, v, o, gate, up, down");
  std::vector<std::string> seen;
  for (const auto& t : l.targets) {
    if (std::find(std::begin(kTargetNames), std::end(kTargetNames), t) == std::end(kTargetNames))
      return Status::error(fmt::format("[lora] targets: unknown target \"{}\" (expected q, k, v, o, gate, up or down)", t));
    if (std::find(seen.begin(), seen.end(), t) != seen.end())
      return Status::error(fmt::format("[lora] targets: \"{}\" is named twice", t));
    seen.push_back(t);
  }
  return Status::ok();
}

bool lora_targets_same(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::string> x = a, y = b;
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  return x == y;
}

nlohmann::json lora_state_json(const LoraState& s) {
  const LoraConfig& l = s.config;
  return {{"rank", l.rank}, {"alpha", l.alpha}, {"dropout", l.dropout}, {"targets", l.targets},
          {"base", s.base}, {"dropout_counter", s.dropout_counter}};
}

Status lora_state_parse(const nlohmann::json& j, const std::string& where, LoraState& out) {
  out = LoraState{};
  try {
    out.config.rank = j.at("rank").get<int>();
    out.config.alpha = j.at("alpha").get<double>();
    out.config.dropout = j.at("dropout").get<double>();
    out.config.targets = j.at("targets").get<std::vector<std::string>>();
    out.base = j.value("base", std::string());
    out.dropout_counter = j.value("dropout_counter", (uint64_t)0);
  } catch (const std::exception& e) {
    return Status::error(fmt::format("{}: state lora: {}", where, e.what()));
  }
  if (Status s = lora_config_validate(out.config); !s) return Status::error(fmt::format("{}: state lora: {}", where, s.message()));
  return Status::ok();
}

LoraLayout lora_layout(const ModelConfig& c, const LoraConfig& l) {
  LoraLayout out;
  const int C = c.d_model, HS = c.head_size(), Q = c.n_heads * HS, KV = c.n_kv_heads * HS, H = c.ffn_hidden;
  // (in, out, first column in the fused output) per target
  const int dims[kLoraTargets][3] = {{C, Q, 0}, {C, KV, Q}, {C, KV, Q + KV}, {Q, C, 0}, {C, H, 0}, {C, H, H}, {H, C, 0}};
  std::vector<bool> on(kLoraTargets, false);
  for (int t = 0; t < kLoraTargets; t++)
    on[t] = std::find(l.targets.begin(), l.targets.end(), kTargetNames[t]) != l.targets.end();
  int64_t off = 0;
  out.layers.resize(c.n_layers);
  for (int layer = 0; layer < c.n_layers; layer++)
    for (int t = 0; t < kLoraTargets; t++) {
      if (!on[t]) continue;
      LoraSlot& s = out.layers[layer][t];
      s.in = dims[t][0], s.out = dims[t][1], s.col0 = dims[t][2];
      out.max_in = std::max(out.max_in, s.in);
      const std::string base = fmt::format("base_model.model.model.layers.{}.{}.", layer, kModuleNames[t]);
      for (const bool is_a : {true, false}) {
        ParamTensor p;
        p.name = base + (is_a ? "lora_A.weight" : "lora_B.weight");
        p.offset = off;
        p.rows = is_a ? l.rank : s.out;
        p.cols = is_a ? s.in : l.rank;
        p.full_rows = p.rows, p.full_cols = p.cols;
        p.full_index = (int)out.params.tensors.size();
        p.decay = true;  // PEFT leaves the adapters in the optimizer's decayed group
        (is_a ? s.a : s.b) = off;
        off += p.size();
        out.params.tensors.push_back(p);
      }
    }
  out.params.total = off;
  out.params.wte = out.params.lnf = out.params.lm_head = -1;
  return out;
}

double train_flops_per_token(const ModelConfig& c, int T, const LoraConfig& l) {
  if (!l.enabled()) return train_flops_per_token(c, T);
  const double attention = 12.0 * c.n_layers * c.d_model * T;
  const double matmul_params = (train_flops_per_token(c, T) - attention) / 6.0;
  double adapters = 0;
  for (const auto& layer : lora_layout(c, l).layers)
    for (const LoraSlot& s : layer)
      if (s.a >= 0) adapters += 6.0 * l.rank * (s.in + s.out);
  return 4.0 * matmul_params + attention + adapters;
}

void lora_init(const LoraLayout& lay, float* p, uint64_t seed) {
  std::memset(p, 0, sizeof(float) * lay.params.total);
  for (const auto& layer : lay.layers)
    for (const LoraSlot& s : layer) {
      if (s.a < 0) continue;
      const double bound = 1.0 / std::sqrt((double)s.in);
      const int64_t n = (s.b - s.a);  // A's elements (B follows A)
      for (int64_t i = 0; i < n; i++) {
        const uint64_t z = mix(seed + (uint64_t)(s.a + i) * 0x9E3779B97F4A7C15ull);
        const double u = ((z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        p[s.a + i] = (float)((2 * u - 1) * bound);
      }
    }
}

float lora_keep(uint64_t seed, uint64_t counter, int layer, int target, int64_t row, int64_t col, double p) {
  if (p <= 0) return 1.0f;
  uint64_t z = mix(seed ^ 0xD1B54A32D192ED03ull);
  z = mix(z ^ counter);
  z = mix(z ^ ((uint64_t)layer << 8 | (uint64_t)target));
  z = mix(z ^ ((uint64_t)row << 24 | (uint64_t)col));
  const double u = (z >> 11) * (1.0 / 9007199254740992.0);
  return u < p ? 0.0f : (float)(1.0 / (1.0 - p));
}

bool lora_target_of(const LoraAdapters& a, const std::string& base_name, int& layer, int& target) {
  static const std::string pre = "model.layers.";
  if (!a.on() || base_name.rfind(pre, 0) != 0) return false;
  size_t end = pre.size();
  int l = 0;
  while (end < base_name.size() && base_name[end] >= '0' && base_name[end] <= '9') l = 10 * l + (base_name[end++] - '0');
  if (end == pre.size() || l >= (int)a.layout.layers.size()) return false;
  for (int t = 0; t < kLoraTargets; t++)
    if (a.layout.layers[l][t].a >= 0 && base_name.compare(end, std::string::npos, fmt::format(".{}.weight", kModuleNames[t])) == 0) {
      layer = l, target = t;
      return true;
    }
  return false;
}

void lora_merge_into(const LoraAdapters& a, int layer, int target, float* w) {
  const LoraSlot& s = a.layout.layers[layer][target];
  const int r = a.config.rank;
  gemm_f32(false, false, s.out, s.in, r, a.config.scale(), a.params.data() + s.b, r, a.params.data() + s.a, s.in, 1.0f,
           w, s.in);
}

namespace {
// x . y over n in a fixed order: 16 running sums (vectorizable without reassociation), then summed pairwise.
float dot_fixed(const float* x, const float* y, int n) {
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; j++) acc[j] += x[i + j] * y[i + j];
  for (int j = 0; i < n; i++, j++) acc[j] += x[i] * y[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; j++) acc[j] += acc[j + w];
  return acc[0];
}
}  // namespace

void lora_apply_rows(const LoraAdapters& a, int layer, int target, float* out, int ldo, const float* x, int n,
                     float* u) {
  const LoraSlot& s = a.layout.layers[layer][target];
  const int r = a.config.rank;
  const float* A = a.params.data() + s.a;
  const float* B = a.params.data() + s.b;
  const float scale = a.config.scale();
  for (int row = 0; row < n; row++) {
    const float* xr = x + (int64_t)row * s.in;
    for (int k = 0; k < r; k++) u[k] = scale * dot_fixed(xr, A + (int64_t)k * s.in, s.in);
    float* o = out + (int64_t)row * ldo + s.col0;
    for (int j = 0; j < s.out; j++) o[j] += dot_fixed(B + (int64_t)j * r, u, r);
  }
}

void lora_forward(const LoraOp& op, float* out, int ldo, const float* x, float* xd, float* u, int N, int threads) {
  const bool drop = op.p > 0;
  tiled(N, threads, [&](int r0, int r1) {
    const int n = r1 - r0;
    if (drop) drop_rows(op, x, xd, r0, r1);
    const float* in = (drop ? xd : x) + (int64_t)r0 * op.in;
    float* ur = u + (int64_t)r0 * op.rank;
    gemm_f32(false, true, n, op.rank, op.in, 1.0f, in, op.in, op.A, op.in, 0.0f, ur, op.rank);
    gemm_f32(false, true, n, op.out, op.rank, op.scale, ur, op.rank, op.B, op.rank, 1.0f,
             out + (int64_t)r0 * ldo + op.col0, ldo);
  });
}

void lora_backward(const LoraOp& op, float* dinp, const float* dout, int ldo, const float* x, const float* u,
                   float* xd, float* du, float* dxd, int N, int threads) {
  const bool drop = op.p > 0;
  const float* dt = dout + op.col0;
  // du = scale * dout_t B (rows), and the dropped input again where there is dropout
  tiled(N, threads, [&](int r0, int r1) {
    gemm_f32(false, false, r1 - r0, op.rank, op.out, op.scale, dt + (int64_t)r0 * ldo, ldo, op.B, op.rank, 0.0f,
             du + (int64_t)r0 * op.rank, op.rank);
    if (drop) drop_rows(op, x, xd, r0, r1);
  });
  // dB += scale * dout_t^T u (B's rows), dA += du^T drop(x) (A's columns)
  tiled(op.out, threads, [&](int c0, int c1) {
    gemm_f32(true, false, c1 - c0, op.rank, N, op.scale, dt + c0, ldo, u, op.rank, 1.0f, op.dB + (int64_t)c0 * op.rank,
             op.rank);
  });
  const float* in = drop ? xd : x;
  tiled(op.in, threads, [&](int c0, int c1) {
    gemm_f32(true, false, op.rank, c1 - c0, N, 1.0f, du, op.rank, in + c0, op.in, 1.0f, op.dA + c0, op.in);
  });
  // dinp += du A, through the mask where there is dropout
  tiled(N, threads, [&](int r0, int r1) {
    const int64_t at = (int64_t)r0 * op.in;
    if (!drop) {
      gemm_f32(false, false, r1 - r0, op.in, op.rank, 1.0f, du + (int64_t)r0 * op.rank, op.rank, op.A, op.in, 1.0f,
               dinp + at, op.in);
      return;
    }
    gemm_f32(false, false, r1 - r0, op.in, op.rank, 1.0f, du + (int64_t)r0 * op.rank, op.rank, op.A, op.in, 0.0f,
             dxd + at, op.in);
    for (int r = r0; r < r1; r++)
      for (int i = 0; i < op.in; i++) {
        const int64_t k = (int64_t)r * op.in + i;
        dinp[k] += dxd[k] * lora_keep(op.seed, op.counter, op.layer, op.target, r, i, op.p);
      }
  });
}

}  // namespace smelt
