// The serving engine (serve/engine.hpp) on a tiny random model with a real tokenizer: a greedy
// request gives the same ids alone and among 8 concurrent ones (batch invariance through the
// scheduler), a full queue refuses, a cancelled request frees its slot, stop strings cut the text
// (also when they span tokens) and the streamed pieces add up to the result, max_tokens and the
// context end a request with "length", logprobs are sorted log-probabilities, shutdown aborts what
// is left, and bad requests are refused before they run. Prompt log probabilities (prompt_logprobs)
// equal a teacher-forced pass through model/decoder.hpp and are the same bits alone and batched;
// max_tokens 0 scores a prompt without generating; submit_all queues all or none.
#include <chrono>
#include <cmath>
#include <cstring>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "cli/tiny_checkpoint.hpp"
#include "smelt/model/decoder.hpp"
#include "smelt/model/model.hpp"
#include "smelt/serve/engine.hpp"
#include "smelt/serve/text_stream.hpp"

namespace fs = std::filesystem;
using namespace smelt;

namespace {

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("smelt_engine_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    const std::string tp = (*dir_ / "tokenizer.json").string();
    ASSERT_TRUE(test::train_tiny_tokenizer(tp, 400));
    tok_ = new Tokenizer;
    ASSERT_TRUE(Tokenizer::load(tp, *tok_));
    cfg_ = new ModelConfig;
    cfg_->vocab_size = 416;  // padded past the tokenizer's 400: those ids must never come out
    cfg_->d_model = 64;
    cfg_->n_layers = 2;
    cfg_->n_heads = 4;
    cfg_->n_kv_heads = 2;
    cfg_->ffn_hidden = 128;
    cfg_->max_seq_len = 96;
    cfg_->init_std = 0.3;
    Model m;
    ASSERT_TRUE(m.init(*cfg_, 1, 32, 1, 4242));
    params_ = new std::vector<float>(m.params(), m.params() + m.layout().total);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
    delete tok_;
    delete cfg_;
    delete params_;
  }

  Status start(Engine& e, int slots, int max_queue, int threads = 1, WeightFormat f = WeightFormat::kF32) {
    EngineConfig ec;
    ec.slots = slots;
    ec.max_queue = max_queue;
    ec.threads = threads;
    ec.prefill_chunk = 7;
    ec.format = f;
    return e.start(*cfg_, *params_, *tok_, ec);
  }

  // A request whose result arrives in a future; streamed text is appended to *streamed.
  static std::shared_ptr<GenRequest> request(const std::string& prompt, int max_tokens,
                                             std::promise<GenResult>& done, std::string* streamed = nullptr) {
    auto r = std::make_shared<GenRequest>();
    std::vector<uint32_t> ids;
    tok_->encode(prompt, ids);
    r->prompt.assign(ids.begin(), ids.end());
    r->max_tokens = max_tokens;
    r->sampling.temperature = 0;
    r->ignore_eos = true;
    r->on_token = [streamed](const TokenEvent& ev) {
      if (streamed) *streamed += ev.text;
      return true;
    };
    r->on_done = [&done](const GenResult& g) { done.set_value(g); };
    return r;
  }

  static GenResult wait(std::promise<GenResult>& p) {
    auto f = p.get_future();
    EXPECT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    return f.get();
  }

  // The reference for prompt scoring: log p(p[i] | p[<i]) for i >= 1 ([0] unused), one token at a
  // time through a one-slot decoder, log-softmax in double over the tokenizer's ids (the padded
  // ones left out), and each position's most likely id.
  static std::vector<double> teacher_forced(const std::vector<int32_t>& p, std::vector<int32_t>& argmax) {
    Decoder d;
    DecoderOptions o;
    o.slots = 1;
    o.max_rows = 1;
    o.batch_invariant = true;
    EXPECT_TRUE(d.init(*cfg_, params_->data(), o));
    const int Vt = (int)tok_->vocab_size();
    std::vector<float> z(cfg_->vocab_size);
    std::vector<double> out(p.size(), 0.0);
    argmax.assign(p.size(), -1);
    for (size_t i = 0; i + 1 < p.size(); i++) {
      DecodeRow row{0, p[i], true};
      EXPECT_TRUE(d.step(&row, 1, z.data()));
      int best = 0;
      for (int v = 1; v < Vt; v++)
        if (z[v] > z[best]) best = v;
      double sum = 0;
      for (int v = 0; v < Vt; v++) sum += std::exp((double)z[v] - z[best]);
      out[i + 1] = (double)z[p[i + 1]] - z[best] - std::log(sum);
      argmax[i + 1] = best;
    }
    return out;
  }

  static fs::path* dir_;
  static Tokenizer* tok_;
  static ModelConfig* cfg_;
  static std::vector<float>* params_;
};
fs::path* EngineTest::dir_ = nullptr;
Tokenizer* EngineTest::tok_ = nullptr;
ModelConfig* EngineTest::cfg_ = nullptr;
std::vector<float>* EngineTest::params_ = nullptr;

const char* kPrompts[8] = {"The kernel", "static int", "内核", "Use tabs", "if (x)", "Comments are", "函数", "a"};

TEST_F(EngineTest, GreedyIdsAreTheSameAloneAndAmongEightConcurrentRequests) {
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kQ8_0}) {
    std::vector<std::vector<int32_t>> alone(8);
    {
      Engine e;
      ASSERT_TRUE(start(e, 1, 8, 1, f));
      for (int i = 0; i < 8; i++) {
        std::promise<GenResult> p;
        ASSERT_EQ(e.submit(request(kPrompts[i], 20, p)), Admission::kAccepted);
        GenResult g = wait(p);
        EXPECT_EQ(g.finish, FinishReason::kLength);
        EXPECT_EQ(g.completion_tokens, 20);
        for (int32_t id : g.ids) EXPECT_LT(id, (int32_t)tok_->vocab_size()) << "a padding id was sampled";
        alone[i] = g.ids;
      }
    }
    Engine e;
    ASSERT_TRUE(start(e, 8, 0, 2, f));  // all eight at once, two threads
    std::promise<GenResult> p[8];
    for (int i = 0; i < 8; i++) ASSERT_EQ(e.submit(request(kPrompts[i], 20 + i, p[i])), Admission::kAccepted);
    for (int i = 0; i < 8; i++) {
      GenResult g = wait(p[i]);
      ASSERT_EQ((int)g.ids.size(), 20 + i);
      g.ids.resize(20);
      EXPECT_EQ(g.ids, alone[i]) << weight_format_name(f) << " prompt " << i << " decoded differently in a batch";
    }
    EXPECT_GT(e.stats().steps, 0u);
    EXPECT_EQ(e.stats().requests_ok, 8u);
  }
}

TEST_F(EngineTest, AFullQueueRefusesAndEveryAcceptedRequestCompletes) {
  Engine e;
  ASSERT_TRUE(start(e, 1, 1));
  // The first request holds the scheduler inside its first token until both others were submitted.
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::promise<GenResult> p0, p1, p2;
  auto r0 = request("The kernel", 5, p0);
  r0->on_token = [&](const TokenEvent&) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return go; });
    return true;
  };
  ASSERT_EQ(e.submit(r0), Admission::kAccepted);
  for (int i = 0; i < 200 && e.stats().busy_slots == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(e.submit(request("static", 5, p1)), Admission::kAccepted);  // waits in the queue
  std::string why;
  EXPECT_EQ(e.submit(request("if", 5, p2), &why), Admission::kQueueFull);
  EXPECT_NE(why.find("max-queue"), std::string::npos) << why;
  EXPECT_EQ(e.stats().queue_depth, 1);
  {
    std::lock_guard<std::mutex> l(mu);
    go = true;
  }
  cv.notify_all();
  EXPECT_EQ(wait(p0).completion_tokens, 5);
  EXPECT_EQ(wait(p1).completion_tokens, 5);
  EXPECT_EQ(e.stats().requests_rejected, 1u);
}

TEST_F(EngineTest, ACancelledRequestFreesItsSlot) {
  Engine e;
  ASSERT_TRUE(start(e, 1, 4));
  std::promise<GenResult> p;
  auto r = request("The kernel", 50, p);
  int seen = 0;
  r->on_token = [&](const TokenEvent&) { return ++seen < 3; };
  ASSERT_EQ(e.submit(r), Admission::kAccepted);
  GenResult g = wait(p);
  EXPECT_EQ(g.finish, FinishReason::kCancelled);
  EXPECT_EQ(g.completion_tokens, 3);
  EXPECT_EQ(e.stats().busy_slots, 0);
  std::promise<GenResult> q;
  ASSERT_EQ(e.submit(request("static", 4, q)), Admission::kAccepted);
  EXPECT_EQ(wait(q).completion_tokens, 4) << "the slot was not free for the next request";
  EXPECT_EQ(e.stats().requests_cancelled, 1u);
}

TEST_F(EngineTest, StopStringsCutTheTextAndTheStreamAddsUpToTheResult) {
  Engine e;
  ASSERT_TRUE(start(e, 2, 4));
  std::promise<GenResult> p;
  std::string streamed;
  ASSERT_EQ(e.submit(request("The kernel", 40, p, &streamed)), Admission::kAccepted);
  GenResult full = wait(p);
  EXPECT_EQ(streamed, full.text);
  TextStream ts(*tok_);
  for (int32_t id : full.ids) ts.push((uint32_t)id);
  ts.finish();
  EXPECT_EQ(full.text, ts.text()) << "the result's text is not the text of its ids";
  ASSERT_GE(full.text.size(), 12u) << full.text;
  // A stop string from the middle of the text, 4 bytes starting at byte 8 (it may span tokens).
  size_t at = 8;
  while (at < full.text.size() && (full.text[at] & 0xC0) == 0x80) at++;  // a character boundary
  const std::string stop = full.text.substr(at, 4);
  std::promise<GenResult> q;
  std::string streamed2;
  auto r = request("The kernel", 40, q, &streamed2);
  r->stop = {"\x01never", stop};
  ASSERT_EQ(e.submit(r), Admission::kAccepted);
  GenResult cut = wait(q);
  EXPECT_EQ(cut.finish, FinishReason::kStop);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_EQ(streamed2, cut.text) << "text streamed past a stop string or was lost";
  EXPECT_LT(cut.completion_tokens, full.completion_tokens);
}

TEST_F(EngineTest, MaxTokensAndTheContextEndARequestWithLength) {
  Engine e;
  EngineConfig ec;
  ec.slots = 1;
  ec.ctx = 24;
  ASSERT_TRUE(e.start(*cfg_, *params_, *tok_, ec));
  std::promise<GenResult> p;
  auto r = request("The kernel", 1000, p);
  const int prompt = (int)r->prompt.size();
  ASSERT_EQ(e.submit(r), Admission::kAccepted);
  GenResult g = wait(p);
  EXPECT_EQ(g.finish, FinishReason::kLength);
  EXPECT_EQ(g.prompt_tokens, prompt);
  EXPECT_EQ(g.completion_tokens, 24 - prompt) << "prompt + completion must fill the context exactly";
  EXPECT_GT(g.ttft_seconds, 0);
  EXPECT_GE(g.total_seconds, g.ttft_seconds);
  EngineStats s = e.stats();
  EXPECT_EQ(s.generated_tokens, (uint64_t)(24 - prompt));
  EXPECT_EQ(s.prompt_tokens, (uint64_t)prompt);
  EXPECT_EQ(s.ttft.count, 1u);
  EXPECT_EQ(s.token_latency.count, (uint64_t)(24 - prompt - 1));
}

TEST_F(EngineTest, LogprobsAreSortedAndTheGreedyTokenIsTheMostLikely) {
  Engine e;
  ASSERT_TRUE(start(e, 1, 1));
  std::promise<GenResult> p;
  auto r = request("内核", 6, p);
  r->logprobs = 5;
  ASSERT_EQ(e.submit(r), Admission::kAccepted);
  GenResult g = wait(p);
  ASSERT_EQ(g.tokens.size(), 6u);
  for (const TokenEvent& ev : g.tokens) {
    ASSERT_EQ(ev.top.size(), 5u);
    EXPECT_EQ(ev.top[0].id, ev.id);
    EXPECT_FLOAT_EQ(ev.top[0].logprob, ev.logprob);
    EXPECT_LE(ev.logprob, 0.0f);
    double mass = 0;
    for (size_t i = 0; i < ev.top.size(); i++) {
      mass += std::exp((double)ev.top[i].logprob);
      if (i) {
        EXPECT_LE(ev.top[i].logprob, ev.top[i - 1].logprob);
      }
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
  }
}

TEST_F(EngineTest, BadRequestsAreRefusedBeforeTheyRun) {
  Engine e;
  EngineConfig ec;
  ec.ctx = 16;
  ASSERT_TRUE(e.start(*cfg_, *params_, *tok_, ec));
  std::promise<GenResult> p;
  std::string why;
  auto r = request("The kernel", 4, p);
  r->prompt.push_back(cfg_->vocab_size);
  EXPECT_EQ(e.submit(r, &why), Admission::kInvalid);
  EXPECT_NE(why.find("vocabulary"), std::string::npos) << why;
  r = request("The kernel", 0, p);
  EXPECT_EQ(e.submit(r, &why), Admission::kInvalid);
  EXPECT_NE(why.find("max_tokens"), std::string::npos) << why;
  r = request("The kernel", 4, p);
  r->sampling.top_p = 0;
  EXPECT_EQ(e.submit(r, &why), Admission::kInvalid);
  EXPECT_NE(why.find("top_p"), std::string::npos) << why;
  r = request("The kernel", 4, p);
  r->prompt.assign(16, 5);
  EXPECT_EQ(e.submit(r, &why), Admission::kTooLong);
  EXPECT_NE(why.find("16 tokens"), std::string::npos) << why;
  r = request("", 4, p);
  r->prompt.clear();
  EXPECT_EQ(e.submit(r, &why), Admission::kInvalid);
}

TEST_F(EngineTest, ShutdownAbortsWhatIsLeftAfterTheGrace) {
  Engine e;
  ASSERT_TRUE(start(e, 1, 2));
  std::promise<GenResult> p0, p1;
  auto r0 = request("The kernel", 80, p0);
  std::atomic<int> seen{0};
  r0->on_token = [&](const TokenEvent&) {
    seen++;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return true;
  };
  ASSERT_EQ(e.submit(r0), Admission::kAccepted);
  ASSERT_EQ(e.submit(request("static", 80, p1)), Admission::kAccepted);  // queued
  while (seen < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  e.shutdown(0);
  EXPECT_EQ(wait(p0).finish, FinishReason::kAborted);
  GenResult q = wait(p1);
  EXPECT_EQ(q.finish, FinishReason::kAborted);
  EXPECT_EQ(q.completion_tokens, 0);
  std::promise<GenResult> p2;
  EXPECT_EQ(e.submit(request("if", 3, p2)), Admission::kStopping);
  EXPECT_EQ(e.stats().requests_aborted, 2u);
}

// Prompts longer than the prefill chunk (7): their scoring spans several steps.
const char* kLongPrompts[3] = {"The kernel coding style is super simple. Just follow these rules",
                               "static int x = 0; if (x) return -1; else return 1;", "内核函数 Comments are good"};

void expect_same_bits(const std::vector<TokenEvent>& a, const std::vector<TokenEvent>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 1; i < a.size(); i++) {
    EXPECT_EQ(a[i].id, b[i].id) << what << " position " << i;
    EXPECT_EQ(std::memcmp(&a[i].logprob, &b[i].logprob, sizeof(float)), 0) << what << " position " << i;
    ASSERT_EQ(a[i].top.size(), b[i].top.size()) << what;
    for (size_t k = 0; k < a[i].top.size(); k++) {
      EXPECT_EQ(a[i].top[k].id, b[i].top[k].id) << what << " position " << i;
      EXPECT_EQ(std::memcmp(&a[i].top[k].logprob, &b[i].top[k].logprob, sizeof(float)), 0) << what << " position " << i;
    }
  }
}

TEST_F(EngineTest, PromptLogprobsEqualATeacherForcedPassAloneAndBatched) {
  std::vector<std::vector<TokenEvent>> alone(3);
  {
    Engine e;
    ASSERT_TRUE(start(e, 1, 4));
    for (int i = 0; i < 3; i++) {
      std::promise<GenResult> p;
      auto r = request(kLongPrompts[i], i == 1 ? 0 : 3, p);  // one scores only, two generate as well
      r->prompt_logprobs = 3;
      ASSERT_GT(r->prompt.size(), 7u) << "the prompt must span more than one prefill chunk";
      ASSERT_EQ(e.submit(r), Admission::kAccepted);
      GenResult g = wait(p);
      EXPECT_EQ(g.completion_tokens, i == 1 ? 0 : 3);
      std::vector<int32_t> argmax;
      const std::vector<double> want = teacher_forced(r->prompt, argmax);
      ASSERT_EQ(g.prompt_events.size(), r->prompt.size()) << i;
      EXPECT_EQ(g.prompt_events[0].id, r->prompt[0]);
      EXPECT_TRUE(std::isnan(g.prompt_events[0].logprob)) << "nothing precedes the first prompt token";
      EXPECT_TRUE(g.prompt_events[0].top.empty());
      for (size_t k = 1; k < r->prompt.size(); k++) {
        const TokenEvent& ev = g.prompt_events[k];
        EXPECT_EQ(ev.id, r->prompt[k]);
        EXPECT_NEAR(ev.logprob, want[k], 1e-5) << "prompt " << i << " position " << k;
        ASSERT_EQ(ev.top.size(), 3u);
        EXPECT_EQ(ev.top[0].id, argmax[k]) << "prompt " << i << " position " << k;
        EXPECT_GE(ev.top[0].logprob, ev.top[1].logprob);
        EXPECT_GE(ev.top[1].logprob, ev.top[2].logprob);
        if (ev.id == ev.top[0].id) {
          EXPECT_EQ(ev.logprob, ev.top[0].logprob) << "the greedy check compares these for equality";
        }
      }
      alone[i] = g.prompt_events;
    }
  }
  // all three at once beside two generating requests, two threads: the same bits
  Engine e;
  ASSERT_TRUE(start(e, 5, 0, 2));
  std::promise<GenResult> p[5];
  ASSERT_EQ(e.submit(request("static int", 12, p[3])), Admission::kAccepted);
  ASSERT_EQ(e.submit(request("The kernel", 9, p[4])), Admission::kAccepted);
  std::vector<std::shared_ptr<GenRequest>> rs;
  for (int i = 0; i < 3; i++) {
    rs.push_back(request(kLongPrompts[i], i == 1 ? 0 : 3, p[i]));
    rs.back()->prompt_logprobs = 3;
  }
  ASSERT_EQ(e.submit_all(rs), Admission::kAccepted);
  for (int i = 0; i < 3; i++) expect_same_bits(wait(p[i]).prompt_events, alone[i], "prompt " + std::to_string(i));
  wait(p[3]);
  wait(p[4]);
  EXPECT_EQ(e.stats().requests_ok, 5u);
}

TEST_F(EngineTest, MaxTokensZeroScoresThePromptAndGeneratesNothing) {
  Engine e;
  EngineConfig ec;
  ec.slots = 2;
  ec.ctx = 24;
  ec.prefill_chunk = 5;
  ASSERT_TRUE(e.start(*cfg_, *params_, *tok_, ec));
  std::promise<GenResult> p;
  auto r = request("", 0, p);
  r->prompt.assign(24, 0);  // fills the context: nothing needs to follow it
  for (int i = 0; i < 24; i++) r->prompt[i] = 30 + i;
  r->prompt_logprobs = 0;
  int tokens = 0;
  r->on_token = [&](const TokenEvent&) { return ++tokens > 0; };
  ASSERT_EQ(e.submit(r), Admission::kAccepted);
  GenResult g = wait(p);
  EXPECT_EQ(tokens, 0) << "a scoring request hands out no token";
  EXPECT_EQ(g.finish, FinishReason::kLength);
  EXPECT_EQ(g.completion_tokens, 0);
  EXPECT_TRUE(g.ids.empty());
  EXPECT_TRUE(g.text.empty());
  EXPECT_EQ(g.prompt_tokens, 24);
  ASSERT_EQ(g.prompt_events.size(), 24u);
  for (size_t i = 1; i < 24; i++) {
    EXPECT_LE(g.prompt_events[i].logprob, 0.0f);
    EXPECT_TRUE(g.prompt_events[i].top.empty()) << "prompt_logprobs 0: the token's own only";
  }
  EngineStats s = e.stats();
  EXPECT_EQ(s.prompt_tokens, 24u);
  EXPECT_EQ(s.generated_tokens, 0u);
  EXPECT_EQ(s.requests_ok, 1u);
  EXPECT_EQ(s.ttft.count, 0u) << "no first token, no time to it";
  // the same prompt wanting a token does not fit; without prompt_logprobs max_tokens 0 is refused
  std::string why;
  r->max_tokens = 1;
  EXPECT_EQ(e.submit(r, &why), Admission::kTooLong);
  r->max_tokens = 0;
  r->prompt_logprobs = -1;
  EXPECT_EQ(e.submit(r, &why), Admission::kInvalid);
  EXPECT_NE(why.find("max_tokens"), std::string::npos) << why;
  r->prompt_logprobs = 21;
  EXPECT_EQ(e.submit(r, &why), Admission::kInvalid);
  EXPECT_NE(why.find("prompt_logprobs"), std::string::npos) << why;
}

TEST_F(EngineTest, SubmitAllQueuesAllOrNone) {
  Engine e;
  ASSERT_TRUE(start(e, 1, 2));
  // The first request holds the scheduler inside its first token while the others are submitted.
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::promise<GenResult> p0;
  auto r0 = request("The kernel", 3, p0);
  r0->on_token = [&](const TokenEvent&) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return go; });
    return true;
  };
  ASSERT_EQ(e.submit(r0), Admission::kAccepted);
  for (int i = 0; i < 200 && e.stats().busy_slots == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::promise<GenResult> q[3];
  int ran = 0;
  std::vector<std::shared_ptr<GenRequest>> three;
  for (int i = 0; i < 3; i++) {
    three.push_back(request("static", 2, q[i]));
    three.back()->on_done = [&ran](const GenResult&) { ran++; };
  }
  std::string why;
  int which = -1;
  EXPECT_EQ(e.submit_all(three, &why, &which), Admission::kQueueFull) << "1 busy slot + 2 queue places < 1 + 3";
  EXPECT_NE(why.find("3 requests"), std::string::npos) << why;
  EXPECT_EQ(e.stats().queue_depth, 0) << "none of a refused list may queue";
  three[1]->prompt.push_back(cfg_->vocab_size);
  EXPECT_EQ(e.submit_all(three, &why, &which), Admission::kInvalid);
  EXPECT_EQ(which, 1);
  EXPECT_EQ(e.stats().queue_depth, 0);
  std::promise<GenResult> a, b;
  ASSERT_EQ(e.submit_all({request("if", 2, a), request("int", 2, b)}), Admission::kAccepted);
  EXPECT_EQ(e.stats().queue_depth, 2);
  {
    std::lock_guard<std::mutex> l(mu);
    go = true;
  }
  cv.notify_all();
  EXPECT_EQ(wait(p0).completion_tokens, 3);
  EXPECT_EQ(wait(a).completion_tokens, 2);
  EXPECT_EQ(wait(b).completion_tokens, 2);
  EXPECT_EQ(ran, 0);
}

}  // namespace
