// Temperature / top-k / top-p sampling over a candidate list, in the Hugging Face order
// (temperature, then top-k, then top-p on the renormalised top-k set), with probabilities in
// double. Not the decoding loop (cli/generate_cmd.cpp).
#include "smelt/serve/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace smelt {

namespace {
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

void SampleRng::seed_with(uint64_t seed) {
  uint64_t z = seed;
  for (auto& s : s_) {  // splitmix64: never an all-zero state
    uint64_t v = (z += 0x9E3779B97F4A7C15ull);
    v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
    v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
    s = v ^ (v >> 31);
  }
}

uint64_t SampleRng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double SampleRng::uniform() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }

Status sampling_config_validate(const SamplingConfig& c) {
  if (!(c.temperature >= 0.0f) || !std::isfinite(c.temperature))
    return Status::error(fmt::format("[sampling] temperature = {}: must be a finite number >= 0 "
                                     "(0 is greedy)", c.temperature));
  if (c.top_k < 0)
    return Status::error(fmt::format("[sampling] top_k = {}: must be >= 0 (0 keeps every token)",
                                     c.top_k));
  if (!(c.top_p > 0.0f && c.top_p <= 1.0f))
    return Status::error(fmt::format("[sampling] top_p = {}: must be in (0, 1] (1 keeps every "
                                     "token)", c.top_p));
  if (!(c.frequency_penalty >= -2.0f && c.frequency_penalty <= 2.0f))
    return Status::error(fmt::format("[sampling] frequency_penalty = {}: must be in [-2, 2] (0: off)",
                                     c.frequency_penalty));
  if (!(c.presence_penalty >= -2.0f && c.presence_penalty <= 2.0f))
    return Status::error(fmt::format("[sampling] presence_penalty = {}: must be in [-2, 2] (0: off)",
                                     c.presence_penalty));
  return Status::ok();
}

void apply_repeat_penalty(float* logits, int V, const int32_t* history, int n, float penalty, int last_n) {
  if (penalty == 1.0f || n <= 0 || last_n <= 0) return;
  const int from = std::max(0, n - last_n);
  std::vector<int32_t> seen(history + from, history + n);
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (int32_t id : seen)
    if (id >= 0 && id < V) logits[id] = logits[id] > 0.0f ? logits[id] / penalty : logits[id] * penalty;
}

Status Sampler::init(const SamplingConfig& c, int V) {
  if (auto s = sampling_config_validate(c); !s) return s;
  if (V <= 0) return Status::error(fmt::format("[sampling] vocabulary size {}: must be > 0", V));
  cfg_ = c;
  V_ = V;
  rng_.seed_with(c.seed);
  idx_.assign(V, 0);
  prob_.assign(V, 0.0);
  const bool penalties = c.frequency_penalty != 0.0f || c.presence_penalty != 0.0f;
  count_.assign(penalties ? V : 0, 0);
  z_.assign(penalties ? V : 0, 0.0f);
  seen_.clear();
  seen_.reserve(penalties ? 256 : 0);
  return Status::ok();
}

const float* Sampler::penalized(const float* logits) {
  if (count_.empty() || seen_.empty()) return logits;
  std::copy(logits, logits + V_, z_.begin());
  for (int32_t id : seen_) z_[id] -= (float)count_[id] * cfg_.frequency_penalty + cfg_.presence_penalty;
  return z_.data();
}

int32_t sampling_argmax(const float* logits, int V) {
  int32_t best = 0;
  for (int i = 1; i < V; i++)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int Sampler::kept(const float* logits) {
  const int V = V_;
  if (cfg_.temperature == 0.0f) {
    idx_[0] = sampling_argmax(logits, V);
    prob_[0] = 1.0;
    return 1;
  }
  std::iota(idx_.begin(), idx_.end(), 0);
  // Most likely first; equal logits: lower id first (a total order, so the result is the same
  // for any sort implementation).
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int n = V;
  sorted_ = true;
  if (cfg_.top_k > 0 && cfg_.top_k < V) {
    n = cfg_.top_k;
    std::nth_element(idx_.begin(), idx_.begin() + (n - 1), idx_.end(), before);
    std::sort(idx_.begin(), idx_.begin() + n, before);
  } else if (cfg_.top_p < 1.0f) {
    std::sort(idx_.begin(), idx_.end(), before);
  } else {
    sorted_ = false;  // every id kept, in id order: sampling needs no order
  }
  // softmax(logits / T) over the n kept, in double
  double mx = -INFINITY;
  for (int i = 0; i < n; i++) mx = std::max(mx, (double)logits[idx_[i]]);
  const double inv_t = 1.0 / cfg_.temperature;
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += prob_[i] = std::exp(((double)logits[idx_[i]] - mx) * inv_t);
  for (int i = 0; i < n; i++) prob_[i] /= sum;
  if (cfg_.top_p < 1.0f) {
    // The smallest prefix (sorted most likely first) whose mass reaches top_p; at least one token.
    double mass = 0.0;
    int keep = 0;
    while (keep < n && mass < cfg_.top_p) mass += prob_[keep++];
    n = std::max(keep, 1);
    for (int i = 0; i < n; i++) prob_[i] /= mass;
  }
  return n;
}

int32_t Sampler::sample(const float* logits) {
  const int n = kept(penalized(logits));
  int32_t id = idx_[n - 1];  // u within rounding of 1
  if (cfg_.temperature == 0.0f) {
    id = idx_[0];
  } else {
    double u = rng_.uniform(), c = 0.0;  // one draw per token whatever survives the filters
    for (int i = 0; i < n; i++) {
      c += prob_[i];
      if (u < c) {
        id = idx_[i];
        break;
      }
    }
  }
  if (!count_.empty() && count_[id]++ == 0) seen_.push_back(id);
  return id;
}

void Sampler::distribution(const float* logits, std::vector<std::pair<int32_t, double>>& out) {
  const int n = kept(penalized(logits));
  out.clear();
  for (int i = 0; i < n; i++) out.push_back({idx_[i], prob_[i]});
  if (!sorted_)  // kept() skips the sort when nothing is filtered: sort here
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
      return a.second > b.second || (a.second == b.second && a.first < b.first);
    });
}

}  // namespace smelt
