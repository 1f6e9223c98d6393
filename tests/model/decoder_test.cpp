// Batched decoding (model/decoder.hpp): several sequences in one decoder, their prompts' chunks
// and decode rows mixed in the same steps, give bit for bit the logits each gets alone in a
// one-slot decoder (batch invariance), with 1 and 2 threads, in every weight format (f16 and bf16
// with their 16-bit KV caches); a one-slot f32 decoder agrees with the training model's full
// forward (inference_test covers that through InferenceSession); the other formats and 16-bit KV
// caches stay close to f32; the bytes are known before init; bad rows change nothing.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "smelt/model/decoder.hpp"
#include "smelt/model/model.hpp"
#include "smelt/serve/sampling.hpp"

using namespace smelt;

namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.vocab_size = 96;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 96;
  c.tie_embeddings = false;
  c.max_seq_len = 64;
  c.init_std = 0.25;
  return c;
}

std::vector<int32_t> prompt_of(int len, int salt, int V) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; i++) p.push_back((int32_t)((i * 37 + salt * 11 + 5) % V));
  return p;
}

// Greedy decoding of one sequence alone: prompt in chunks of `chunk`, then `steps` tokens (its
// own argmax, or forced[t] when given). Returns every logits row the sequence produced (the
// prompt's last, then one per step).
std::vector<std::vector<float>> alone(const ModelConfig& c, const float* params, WeightFormat f, int threads,
                                      const std::vector<int32_t>& prompt, int steps, int chunk,
                                      const std::vector<int32_t>* forced = nullptr,
                                      std::optional<KvFormat> kv = std::nullopt) {
  Decoder d;
  DecoderOptions o;
  o.slots = 1;
  o.max_rows = chunk;
  o.threads = threads;
  o.format = f;
  o.batch_invariant = true;
  o.kv_cache = kv;
  EXPECT_TRUE(d.init(c, params, o));
  const int V = c.vocab_size;
  std::vector<std::vector<float>> out;
  std::vector<float> z(V);
  for (size_t done = 0; done < prompt.size();) {
    std::vector<DecodeRow> rows;
    for (int i = 0; i < chunk && done < prompt.size(); i++, done++) rows.push_back({0, prompt[done], done + 1 == prompt.size()});
    EXPECT_TRUE(d.step(rows.data(), (int)rows.size(), z.data()));
  }
  out.push_back(z);
  for (int t = 0; t < steps; t++) {
    DecodeRow r{0, forced ? (*forced)[t] : sampling_argmax(z.data(), V), true};
    EXPECT_TRUE(d.step(&r, 1, z.data()));
    out.push_back(z);
  }
  return out;
}

struct InvariantCase {
  WeightFormat format;
  int threads;
};

class DecoderBatch : public ::testing::TestWithParam<InvariantCase> {};

TEST_P(DecoderBatch, EachSequenceGetsItsAloneBitsInAnyBatch) {
  const ModelConfig c = tiny();
  const int V = c.vocab_size, steps = 12;
  Model m;
  ASSERT_TRUE(m.init(c, 1, 32, 1, 99));
  const auto [format, threads] = GetParam();
  // Three sequences of different prompt lengths; the batch decoder takes their prompts 5 rows
  // per step (so sequence 2 starts decoding while 0 still reads its prompt) and staggers them.
  const std::vector<std::vector<int32_t>> prompts = {prompt_of(17, 0, V), prompt_of(3, 1, V), prompt_of(9, 2, V)};
  const int start[3] = {0, 0, 2};  // step at which each sequence arrives
  std::vector<std::vector<std::vector<float>>> want;
  for (const auto& p : prompts) want.push_back(alone(c, m.params(), format, 1, p, steps, 4));

  Decoder d;
  DecoderOptions o;
  o.slots = 4;
  o.max_rows = 16;
  o.threads = threads;
  o.format = format;
  o.batch_invariant = true;
  ASSERT_TRUE(d.init(c, m.params(), o));
  // Slot 3 carries a fourth sequence that is cleared half-way, to show a reused slot is clean.
  struct State {
    size_t fed = 0;
    int32_t next = -1;
    std::vector<std::vector<float>> got;
  } st[3];
  const int slot_of[3] = {2, 0, 1};
  std::vector<float> z((size_t)16 * V);
  for (int step = 0; step < 60; step++) {
    std::vector<DecodeRow> rows;
    std::vector<int> who;
    if (step < 6) rows.push_back({3, (int32_t)(step % V), false});
    if (step == 6) d.clear(3);
    for (int s = 0; s < 3; s++) {
      if (step < start[s] || (int)st[s].got.size() > steps) continue;
      if (st[s].next >= 0) {
        rows.push_back({slot_of[s], st[s].next, true});
        who.push_back(s);
        continue;
      }
      for (int k = 0; k < 5 && st[s].fed < prompts[s].size(); k++) {
        const bool last = ++st[s].fed == prompts[s].size();
        rows.push_back({slot_of[s], prompts[s][st[s].fed - 1], last});
        if (last) who.push_back(s);
      }
    }
    if (rows.empty()) break;
    ASSERT_TRUE(d.step(rows.data(), (int)rows.size(), z.data()));
    for (size_t r = 0; r < who.size(); r++) {
      State& s = st[who[r]];
      s.got.emplace_back(z.begin() + r * V, z.begin() + (r + 1) * V);
      s.next = sampling_argmax(s.got.back().data(), V);
    }
  }
  for (int s = 0; s < 3; s++) {
    ASSERT_EQ(st[s].got.size(), want[s].size()) << "sequence " << s;
    for (size_t t = 0; t < want[s].size(); t++)
      ASSERT_EQ(0, std::memcmp(st[s].got[t].data(), want[s][t].data(), sizeof(float) * V))
          << "sequence " << s << " logits row " << t << " differ from the sequence decoded alone";
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, DecoderBatch,
                         ::testing::Values(InvariantCase{WeightFormat::kF32, 1}, InvariantCase{WeightFormat::kF32, 2},
                                           InvariantCase{WeightFormat::kF16, 1}, InvariantCase{WeightFormat::kF16, 2},
                                           InvariantCase{WeightFormat::kBf16, 1}, InvariantCase{WeightFormat::kBf16, 2},
                                           InvariantCase{WeightFormat::kQ8_0, 1}, InvariantCase{WeightFormat::kQ8_0, 2}),
                         [](const auto& info) {
                           return std::string(weight_format_name(info.param.format)) + "_" +
                                  std::to_string(info.param.threads) + "threads";
                         });

// q8_0, f16 or bf16 against f32 on the same weights and the same tokens (fed f32's greedy choices, so
// one near-tie does not send the two down different texts): the logits move by the format's
// rounding only, and wherever f32's top-2 margin is clear of that, the argmax agrees. Returns the
// largest logit error over the largest logit.
double format_vs_f32(WeightFormat fmt, std::optional<KvFormat> kv = std::nullopt) {
  const ModelConfig c = tiny();
  const int V = c.vocab_size, steps = 10;
  Model m;
  EXPECT_TRUE(m.init(c, 1, 32, 1, 7));
  const auto p = prompt_of(20, 3, V);
  auto f = alone(c, m.params(), WeightFormat::kF32, 1, p, steps, 8);
  std::vector<int32_t> greedy;
  for (int t = 0; t < steps; t++) greedy.push_back(sampling_argmax(f[t].data(), V));
  auto q = alone(c, m.params(), fmt, 1, p, steps, 8, &greedy, kv);
  EXPECT_EQ(f.size(), q.size());
  double worst = 0;
  int clear = 0, agree = 0;
  for (size_t t = 0; t < f.size() && t < q.size(); t++) {
    double mx = 1, err = 0;
    for (int i = 0; i < V; i++) {
      mx = std::max(mx, (double)std::fabs(f[t][i]));
      err = std::max(err, (double)std::fabs(f[t][i] - q[t][i]));
    }
    worst = std::max(worst, err / mx);
    std::vector<float> sorted = f[t];
    std::sort(sorted.rbegin(), sorted.rend());
    if (sorted[0] - sorted[1] > 2 * err) {
      clear++;
      agree += sampling_argmax(f[t].data(), V) == sampling_argmax(q[t].data(), V);
    }
  }
  std::printf("%s (KV cache %s) vs f32: largest logit error %.4f of the largest logit; %d of %d positions clear of it\n",
              weight_format_name(fmt), kv ? kv_format_name(*kv) : "default", worst, clear, (int)f.size());
  EXPECT_GT(worst, 0.0) << weight_format_name(fmt) << " gave exactly the f32 logits: is its copy used at all?";
  EXPECT_GT(clear, 3);
  EXPECT_EQ(agree, clear) << "max relative logit error " << worst;
  return worst;
}

// int8 rounding (measured on this wide-weight model, whose activations grow layer by layer: 7.6e-2
// of the largest logit). A q8_0 bug (wrong block, scale or sign) moves logits by O(1).
TEST(Decoder, Q8_0StaysCloseToF32) { EXPECT_LT(format_vs_f32(WeightFormat::kQ8_0), 0.15); }

// Half weights and half inputs: 11 significant bits against int8's 8, so well inside q8_0's error.
TEST(Decoder, F16StaysCloseToF32) { EXPECT_LT(format_vs_f32(WeightFormat::kF16), 0.02); }

// bf16 weights and inputs: 8 significant bits, like q8_0's int8 but a scale per value (measured:
// 3.7e-2 of the largest logit on this model, q8_0 7.6e-2).
TEST(Decoder, Bf16StaysCloseToF32) { EXPECT_LT(format_vs_f32(WeightFormat::kBf16), 0.08); }

// A 16-bit KV cache under f32 weights: keys and values rounded once as they are stored, the
// rest fp32. Unset, the cache follows the weights (16-bit for f16 and bf16, so the two tests
// above cover those caches), fp32 for f32 and q8_0.
TEST(Decoder, KvCacheFormatsStayCloseToF32) {
  EXPECT_LT(format_vs_f32(WeightFormat::kF32, KvFormat::kF16), 0.005);
  EXPECT_LT(format_vs_f32(WeightFormat::kF32, KvFormat::kBf16), 0.04);
  DecoderOptions o;
  const std::pair<WeightFormat, KvFormat> defaults[] = {{WeightFormat::kF32, KvFormat::kF32},
                                                        {WeightFormat::kQ8_0, KvFormat::kF32},
                                                        {WeightFormat::kF16, KvFormat::kF16},
                                                        {WeightFormat::kBf16, KvFormat::kBf16}};
  for (auto [w, kv] : defaults) {
    o.format = w;
    o.kv_cache.reset();
    EXPECT_EQ(decoder_kv_format(o), kv) << weight_format_name(w);
    o.kv_cache = KvFormat::kF32;
    EXPECT_EQ(decoder_kv_format(o), KvFormat::kF32) << weight_format_name(w);
  }
  KvFormat k;
  EXPECT_TRUE(kv_format_parse("fp16", k));
  EXPECT_EQ(k, KvFormat::kF16);
  const Status bad = kv_format_parse("q8_0", k);
  EXPECT_FALSE(bad);
  EXPECT_NE(bad.message().find("expected f32, f16 or bf16"), std::string::npos) << bad.message();
}

// decoder_bytes, which a training run's memory plan counts for its task scorer before the decoder
// exists, is what init allocates, in every weight format, tied or not, batch invariant or not
// (bf16 holds the wide steps' GEMM input only where a step can be wide).
TEST(Decoder, BytesAreKnownBeforeInit) {
  for (bool tied : {false, true}) {
    ModelConfig c = tiny();
    c.tie_embeddings = tied;
    Model m;
    ASSERT_TRUE(m.init(c, 1, 32, 1, 1));
    for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kF16, WeightFormat::kQ8_0})
      for (int slot_tokens : {0, 16})
        for (bool invariant : {false, true})
          for (std::optional<KvFormat> kv : {std::optional<KvFormat>(), std::optional(KvFormat::kF32),
                                             std::optional(KvFormat::kBf16)}) {
            DecoderOptions o;
            o.slots = 3;
            o.slot_tokens = slot_tokens;
            o.max_rows = 24;
            o.threads = invariant ? 2 : 1;  // attention's scores: one buffer per thread
            o.format = f;
            o.batch_invariant = invariant;
            o.kv_cache = kv;
            Decoder d;
            ASSERT_TRUE(d.init(c, m.params(), o));
            EXPECT_EQ(decoder_bytes(c, o), d.bytes())
                << weight_format_name(f) << " tied " << tied << " invariant " << invariant << " KV "
                << kv_format_name(decoder_kv_format(o));
          }
  }
  // bf16 under batch invariance: less by the wide steps' bf16 input copy, 24 rows of the widest
  DecoderOptions o;
  o.max_rows = 24;
  o.format = WeightFormat::kBf16;
  const int64_t wide = decoder_bytes(tiny(), o);
  o.batch_invariant = true;
  const ModelConfig c = tiny();
  EXPECT_EQ(wide - decoder_bytes(c, o), 2 * 24 * std::max({c.d_model, c.n_heads * c.head_size(), c.ffn_hidden}));
  // a 16-bit KV cache: half the fp32 cache's bytes (keys and values, every slot, layer and position)
  const int64_t cache = (int64_t)o.slots * c.n_layers * c.max_seq_len * c.n_kv_heads * c.head_size();
  o.kv_cache = KvFormat::kF32;
  const int64_t f32 = decoder_bytes(c, o);
  o.kv_cache = KvFormat::kF16;
  EXPECT_EQ(f32 - decoder_bytes(c, o), 2 * cache * 2);
}

TEST(Decoder, BadRowsAreRefusedAndChangeNothing) {
  const ModelConfig c = tiny();
  Model m;
  ASSERT_TRUE(m.init(c, 1, 32, 1, 1));
  Decoder d;
  DecoderOptions o;
  o.slots = 2;
  o.slot_tokens = 4;
  o.max_rows = 8;
  ASSERT_TRUE(d.init(c, m.params(), o));
  std::vector<float> z((size_t)8 * c.vocab_size);
  DecodeRow ok{0, 1, true}, bad_slot{2, 1, true}, bad_tok{1, c.vocab_size, true};
  DecodeRow pair[2] = {ok, bad_tok};
  Status s = d.step(pair, 2, z.data());
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("vocabulary"), std::string::npos) << s.message();
  EXPECT_EQ(d.position(0), 0) << "a refused step must not have fed its good rows";
  EXPECT_FALSE(d.step(&bad_slot, 1, z.data()));
  DecodeRow five[5] = {ok, ok, ok, ok, ok};
  s = d.step(five, 5, z.data());
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("full"), std::string::npos) << s.message();
  EXPECT_EQ(d.position(0), 0);
  EXPECT_TRUE(d.step(five, 4, z.data()));
  EXPECT_EQ(d.position(0), 4);
  EXPECT_EQ(d.position(1), 0);
}

}  // namespace
