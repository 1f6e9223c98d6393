// Next-token sampling from logits: temperature, top-k, top-p (nucleus, Holtzman et al. 2020),
// greedy at temperature 0, over our own seeded xoshiro256** generator so a seed gives the same
// tokens on every platform and standard library. Not the model (model/inference.hpp).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "smelt/common/status.hpp"

namespace smelt {

// xoshiro256** (Blackman & Vigna 2018), state filled by splitmix64 from the seed.
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed = 0) { seed_with(seed); }
  void seed_with(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1), 53 random bits

 private:
  uint64_t s_[4];
};

struct SamplingConfig {
  float temperature = 1.0f;  // 0: greedy (argmax, lowest id on ties)
  int top_k = 0;             // keep the k most likely tokens; 0: all
  float top_p = 1.0f;        // keep the smallest most-likely set with mass >= top_p; 1: all
  uint64_t seed = 0;
  // OpenAI's penalties, in [-2, 2], on the tokens this sampler has sampled so far (the
  // completion, not the prompt): logit[j] -= count[j] * frequency_penalty + (count[j] > 0) *
  // presence_penalty, before temperature and the filters. 0: off.
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
};

// Errors name the setting, its value and the allowed range.
Status sampling_config_validate(const SamplingConfig& c);

// Repetition penalty (as llama.cpp's repeat_penalty): every distinct id among the last `last_n`
// entries of history (prompt and generated ids) has its logit divided by `penalty` when positive
// and multiplied by it otherwise, in place. penalty 1 changes nothing; ids outside [0, V) are
// skipped.
void apply_repeat_penalty(float* logits, int V, const int32_t* history, int n, float penalty, int last_n);

class Sampler {
 public:
  // Sizes the scratch for a vocabulary of V once (sampling then allocates nothing), and forgets
  // the tokens sampled before.
  Status init(const SamplingConfig& c, int V);
  // One token id from logits (V); advances the generator (not at temperature 0) and counts the
  // id for the frequency and presence penalties.
  int32_t sample(const float* logits);
  // The distribution sample() draws from now: (id, probability) after the penalties,
  // temperature, top-k, top-p and renormalisation, most likely first (ties: lower id first). At
  // temperature 0, the argmax with 1.
  void distribution(const float* logits, std::vector<std::pair<int32_t, double>>& out);
  const SamplingConfig& config() const { return cfg_; }

 private:
  const float* penalized(const float* logits);  // logits, or z_ = logits less the penalties
  int kept(const float* logits);  // fills idx_/prob_ (first n entries), returns n

  SamplingConfig cfg_;
  SampleRng rng_;
  int V_ = 0;
  bool sorted_ = true;        // idx_ is most likely first (false when nothing was filtered)
  std::vector<int32_t> idx_;  // (V) candidate ids
  std::vector<double> prob_;  // (V) their probabilities
  std::vector<int32_t> count_;  // (V) times each id was sampled (with a penalty on)
  std::vector<int32_t> seen_;   // the ids with count_ > 0, in first-sampled order
  std::vector<float> z_;        // (V) penalized logits
};

// The argmax of logits (V), lowest id on ties.
int32_t sampling_argmax(const float* logits, int V);

}  // namespace smelt
