// Prompts, requests and metrics of one task (run.hpp). Standard errors: the sample standard error
// of the mean (unbiased variance / n, as lm-evaluation-harness's mean_stderr) for acc, acc_norm,
// exact_match and loglikelihood; a seeded bootstrap over items for the perplexities.
#include "smelt/eval/run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

using json = nlohmann::json;

const MetricValue* TaskResult::find(const std::string& n) const {
  for (const auto& m : metrics)
    if (m.name == n) return &m;
  return nullptr;
}

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

const std::string& item_answer(const Task& t, const TaskItem& it) {
  switch (t.kind) {
    case TaskKind::kMultipleChoice: return it.choices[(size_t)it.gold];
    case TaskKind::kLoglikelihood: return it.continuation;
    case TaskKind::kGenerate: return it.answer;
    case TaskKind::kPerplexity: break;
  }
  return it.text;
}

std::vector<int32_t> encode(const Tokenizer& tok, const std::string& s) {
  std::vector<uint32_t> ids;
  tok.encode(s, ids, /*allow_special=*/false);
  return {ids.begin(), ids.end()};
}

double mean(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return x.empty() ? 0 : s / (double)x.size();
}

// Sample standard error of the mean: sqrt(unbiased variance / n).
double mean_stderr(const std::vector<double>& x) {
  if (x.size() < 2) return 0;
  const double m = mean(x);
  double ss = 0;
  for (double v : x) ss += (v - m) * (v - m);
  return std::sqrt(ss / (double)(x.size() - 1) / (double)x.size());
}

// Standard deviation of stat over `reps` resamples (with replacement) of the n items.
double bootstrap_stderr(size_t n, int reps, uint64_t seed, const std::function<double(const std::vector<size_t>&)>& stat) {
  if (n < 2 || reps < 2) return 0;
  std::vector<double> v;
  std::vector<size_t> pick(n);
  uint64_t state = seed ^ 0xB0075782ull;
  for (int r = 0; r < reps; r++) {
    for (auto& p : pick) p = (size_t)(splitmix64(state) % n);
    v.push_back(stat(pick));
  }
  return mean_stderr(v) * std::sqrt((double)v.size());
}

// What the items of a task produce before the metrics.
struct Scores {
  std::vector<double> acc, acc_norm, ll, em, nats, words, bytes;
};

int64_t count_words(const std::string& s) {
  int64_t n = 0;
  bool in = false;
  for (unsigned char c : s) {
    const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    if (!space && !in) n++;
    in = !space;
  }
  return n;
}

size_t argmax(const std::vector<double>& v) {
  return (size_t)(std::max_element(v.begin(), v.end()) - v.begin());  // the first of equals
}

Status score_choices(Scorer& sc, const Tokenizer& tok, const Task& t, const TaskItem& it, const std::string& prompt,
                     Scores& s, json* rec, bool& skipped) {
  const std::vector<std::string>& texts =
      t.kind == TaskKind::kMultipleChoice ? it.choices : std::vector<std::string>{it.continuation};
  std::vector<int32_t> ctx;
  std::vector<std::vector<int32_t>> conts(texts.size());
  for (size_t j = 0; j < texts.size(); j++) eval_encode_pair(tok, prompt, t.target_delimiter + texts[j], ctx, conts[j]);
  for (const auto& c : conts)
    if (c.empty() || (int)c.size() >= sc.ctx()) {
      skipped = true;
      return Status::ok();
    }
  std::vector<LlScore> ll;
  if (Status st = sc.loglikelihood(ctx, conts, ll); !st) return st;
  std::vector<double> lp, norm;
  json reqs = json::array();
  for (size_t j = 0; j < texts.size(); j++) {
    lp.push_back(ll[j].logprob);
    norm.push_back(ll[j].logprob / (double)std::max<size_t>(1, texts[j].size()));
    if (rec) reqs.push_back({{"continuation_ids", conts[j]}, {"logprob", ll[j].logprob}, {"greedy", ll[j].greedy}});
  }
  if (t.kind == TaskKind::kMultipleChoice) {
    const size_t pred = argmax(lp), pred_norm = argmax(norm);
    s.acc.push_back(pred == (size_t)it.gold);
    s.acc_norm.push_back(pred_norm == (size_t)it.gold);
    if (rec) *rec = {{"gold", it.gold}, {"pred", pred}, {"pred_norm", pred_norm}, {"acc", pred == (size_t)it.gold},
                     {"acc_norm", pred_norm == (size_t)it.gold}};
  } else {
    s.acc.push_back(ll[0].greedy);
    s.ll.push_back(ll[0].logprob);
    if (rec) *rec = {{"acc", ll[0].greedy}, {"loglikelihood", ll[0].logprob}};
  }
  if (rec) {
    (*rec)["context_ids"] = ctx;
    (*rec)["requests"] = reqs;
  }
  return Status::ok();
}

Status score_generation(Scorer& sc, const Tokenizer& tok, const Task& t, const TaskItem& it, const std::string& prompt,
                        Scores& s, json* rec) {
  std::vector<int32_t> ids = encode(tok, prompt);
  ids.insert(ids.begin(), (int32_t)*tok.eod_id());
  const std::vector<std::string>& until = it.until.empty() ? t.until : it.until;
  std::string text;
  auto cut = [&](std::string& x) {  // x up to the first stop string
    size_t at = std::string::npos;
    for (const auto& u : until)
      if (!u.empty()) at = std::min(at, x.find(u));
    if (at != std::string::npos) x.resize(at);
    return at != std::string::npos;
  };
  std::vector<int32_t> out;
  Status st = sc.greedy(ids, t.max_gen_tokens, (int32_t)*tok.eod_id(), [&](const std::vector<int32_t>& g) {
    text.clear();
    std::vector<uint32_t> u(g.begin(), g.end());
    tok.decode(u.data(), u.size(), text);
    return cut(text);
  }, out);
  if (!st) return st;
  text.clear();
  std::vector<uint32_t> u(out.begin(), out.end());
  tok.decode(u.data(), u.size(), text);
  cut(text);
  const bool hit = eval_normalise(text, t.normalise) == eval_normalise(it.answer, t.normalise);
  s.em.push_back(hit);
  if (rec) *rec = {{"generation", text}, {"answer", it.answer}, {"exact_match", hit}, {"context_ids", ids}};
  return Status::ok();
}

Status score_document(Scorer& sc, const Tokenizer& tok, const TaskItem& it, Scores& s, json* rec) {
  std::vector<int32_t> ids = encode(tok, it.text);
  ids.insert(ids.begin(), (int32_t)*tok.eod_id());
  double lp = 0;
  if (Status st = sc.rolling(ids, lp); !st) return st;
  s.nats.push_back(-lp);
  s.words.push_back((double)count_words(it.text));
  s.bytes.push_back((double)it.text.size());
  if (rec) *rec = {{"loglikelihood", lp}, {"words", s.words.back()}, {"bytes", s.bytes.back()}, {"ids", ids}};
  return Status::ok();
}

// Sum of a over the picked items / sum of b over them.
double ratio(const std::vector<double>& a, const std::vector<double>& b, const std::vector<size_t>& pick) {
  double x = 0, y = 0;
  for (size_t i : pick) x += a[i], y += b[i];
  return y > 0 ? x / y : 0;
}

void fill_metrics(const Task& t, const Scores& s, const EvalRunOptions& o, TaskResult& r) {
  auto add = [&](const char* name, double v, double se) { r.metrics.push_back(MetricValue{name, v, se}); };
  switch (t.kind) {
    case TaskKind::kMultipleChoice:
      add("acc", mean(s.acc), mean_stderr(s.acc));
      add("acc_norm", mean(s.acc_norm), mean_stderr(s.acc_norm));
      break;
    case TaskKind::kLoglikelihood: {
      add("acc", mean(s.acc), mean_stderr(s.acc));
      add("loglikelihood", mean(s.ll), mean_stderr(s.ll));
      std::vector<size_t> all(s.ll.size());
      for (size_t i = 0; i < all.size(); i++) all[i] = i;
      auto ppl = [&](const std::vector<size_t>& p) {
        double x = 0;
        for (size_t i : p) x += s.ll[i];
        return std::exp(-x / (double)std::max<size_t>(1, p.size()));
      };
      add("perplexity", ppl(all), bootstrap_stderr(all.size(), o.bootstrap, o.seed, ppl));
      break;
    }
    case TaskKind::kGenerate: add("exact_match", mean(s.em), mean_stderr(s.em)); break;
    case TaskKind::kPerplexity: {
      std::vector<size_t> all(s.nats.size());
      for (size_t i = 0; i < all.size(); i++) all[i] = i;
      auto bpb = [&](const std::vector<size_t>& p) { return ratio(s.nats, s.bytes, p) / std::log(2.0); };
      auto wp = [&](const std::vector<size_t>& p) { return std::exp(ratio(s.nats, s.words, p)); };
      auto bp = [&](const std::vector<size_t>& p) { return std::exp(ratio(s.nats, s.bytes, p)); };
      add("bits_per_byte", bpb(all), bootstrap_stderr(all.size(), o.bootstrap, o.seed, bpb));
      add("word_perplexity", wp(all), bootstrap_stderr(all.size(), o.bootstrap, o.seed, wp));
      add("byte_perplexity", bp(all), bootstrap_stderr(all.size(), o.bootstrap, o.seed, bp));
      break;
    }
  }
  auto head = std::find_if(r.metrics.begin(), r.metrics.end(), [&](const MetricValue& m) { return m.name == t.metric; });
  if (head != r.metrics.end()) std::rotate(r.metrics.begin(), head, head + 1);
}

}  // namespace

std::vector<size_t> eval_fewshot_draw(const Task& t, size_t index, int k, uint64_t seed) {
  const bool split = !t.fewshot.empty();
  const size_t pool = split ? t.fewshot.size() : (t.items.size() > 0 ? t.items.size() - 1 : 0);
  const size_t want = std::min((size_t)std::max(0, k), pool);
  uint64_t state = seed ^ fnv1a(t.name) ^ (0xD1B54A32D192ED03ull * (index + 1));
  std::vector<size_t> out;
  std::set<size_t> seen;
  while (out.size() < want) {
    size_t r = (size_t)(splitmix64(state) % pool);
    if (!split && r >= index) r++;  // never the item itself
    if (seen.insert(r).second) out.push_back(r);
  }
  return out;
}

std::string eval_prompt(const Task& t, size_t index, int k, uint64_t seed) {
  std::string p = t.description;
  const std::vector<TaskItem>& pool = t.fewshot.empty() ? t.items : t.fewshot;
  const auto picks = eval_fewshot_draw(t, index, k, seed);
  for (size_t i = 0; i < picks.size(); i++) {
    const TaskItem& ex = pool[picks[i]];
    p += ex.context + t.target_delimiter + item_answer(t, ex) + t.fewshot_delimiter;
  }
  return p + t.items[index].context;
}

void eval_encode_pair(const Tokenizer& tok, const std::string& context, const std::string& continuation,
                      std::vector<int32_t>& ctx_ids, std::vector<int32_t>& cont_ids) {
  size_t end = context.size();
  while (end > 0 && (context[end - 1] == ' ' || context[end - 1] == '\t' || context[end - 1] == '\n' ||
                     context[end - 1] == '\r'))
    end--;
  const std::string ctx = context.substr(0, end), cont = context.substr(end) + continuation;
  const std::vector<int32_t> whole = encode(tok, ctx + cont);
  ctx_ids = encode(tok, ctx);
  cont_ids.assign(whole.begin() + (std::ptrdiff_t)std::min(ctx_ids.size(), whole.size()), whole.end());
  ctx_ids.insert(ctx_ids.begin(), (int32_t)*tok.eod_id());
}

std::string eval_normalise(const std::string& in, const TaskNormalise& n) {
  std::string s = in;
  if (n.first_line) s = s.substr(0, s.find('\n'));
  if (n.lower)
    for (auto& c : s)
      if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
  if (n.strip_punct) s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return c < 128 && std::ispunct(c); }), s.end());
  if (n.collapse_spaces) {
    std::string o;
    for (unsigned char c : s) {
      const bool sp = std::isspace(c) != 0;
      if (sp && !o.empty() && o.back() == ' ') continue;
      o += sp ? ' ' : (char)c;
    }
    s = o;
  }
  if (n.strip) {
    const size_t b = s.find_first_not_of(" \t\r\n\f\v"), e = s.find_last_not_of(" \t\r\n\f\v");
    s = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  }
  return s;
}

Status eval_task(Scorer& sc, const Tokenizer& tok, const Task& t, const EvalRunOptions& o, TaskResult& r,
                 const std::function<void(int64_t, int64_t)>& progress) {
  if (!tok.eod_id()) return Status::error("[eval] the tokenizer has no end-of-document token, which starts every prompt");
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t rows0 = sc.rows_run();
  r = TaskResult{};
  r.name = t.name;
  r.kind = task_kind_name(t.kind);
  r.metric = t.metric;
  r.chance = task_chance(t);
  r.fewshot = t.kind == TaskKind::kPerplexity ? 0 : (o.fewshot >= 0 ? o.fewshot : t.num_fewshot);
  const int64_t n = o.limit > 0 ? std::min<int64_t>(o.limit, (int64_t)t.items.size()) : (int64_t)t.items.size();
  Scores s;
  for (int64_t i = 0; i < n; i++) {
    const TaskItem& it = t.items[(size_t)i];
    json rec;
    json* recp = o.samples ? &rec : nullptr;
    bool skipped = false;
    Status st;
    if (t.kind == TaskKind::kPerplexity) st = score_document(sc, tok, it, s, recp);
    else {
      const std::string prompt = eval_prompt(t, (size_t)i, r.fewshot, o.seed);
      st = t.kind == TaskKind::kGenerate ? score_generation(sc, tok, t, it, prompt, s, recp)
                                         : score_choices(sc, tok, t, it, prompt, s, recp, skipped);
    }
    if (!st) return Status::error(fmt::format("[eval] task {}: {} line {}: {}", t.name, t.path, it.line, st.message()));
    if (skipped) r.skipped++;
    else r.items++;
    if (o.samples && !skipped) {
      rec["task"] = t.name;
      rec["index"] = i;
      rec["line"] = it.line;
      r.samples.push_back(std::move(rec));
    }
    if (progress) progress(i + 1, n);
  }
  fill_metrics(t, s, o, r);
  r.rows = sc.rows_run() - rows0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}

json task_result_json(const TaskResult& r) {
  json m = json::object();
  for (const auto& v : r.metrics) {
    m[v.name] = v.value;
    m[v.name + "_stderr"] = v.stderr_;
  }
  json j = {{"task", r.name}, {"kind", r.kind}, {"metric", r.metric}, {"value", r.metrics.empty() ? 0.0 : r.metrics[0].value},
            {"items", r.items}, {"skipped", r.skipped}, {"fewshot", r.fewshot}, {"metrics", m},
            {"seconds", r.seconds}, {"items_per_s", r.seconds > 0 ? (double)r.items / r.seconds : 0.0},
            {"decoder_rows", r.rows}};
  j["chance"] = r.chance >= 0 ? json(r.chance) : json(nullptr);
  return j;
}

}  // namespace smelt
