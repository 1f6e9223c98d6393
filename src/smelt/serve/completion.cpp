// One completion's token-by-token logic (completion.hpp): masking, penalties and sampling, log
// probabilities, end of document, the budget and stop strings. Not the model, not scheduling.
#include "smelt/serve/completion.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace smelt {

namespace {
// Bytes at the end of `held` that could still start a stop string (the longest suffix that is a
// proper prefix of one of them).
size_t stop_prefix_tail(const std::string& held, const std::vector<std::string>& stops) {
  size_t keep = 0;
  for (const std::string& s : stops)
    for (size_t k = std::min(held.size(), s.size() - 1); k > keep; k--)
      if (held.compare(held.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  return keep;
}

// ev.logprob = log-softmax(z)[ev.id] (the sum in double) and the k most likely entries, most likely
// first (ties: the lower id).
void score_logits(const float* z, int V, int k, TokenEvent& ev) {
  float mx = z[0];
  for (int i = 1; i < V; i++) mx = std::max(mx, z[i]);
  double sum = 0;
  for (int i = 0; i < V; i++) sum += std::exp((double)z[i] - mx);
  const float lse = mx + (float)std::log(sum);
  ev.logprob = z[ev.id] - lse;
  if ((k = std::min(k, V)) <= 0) return;
  std::vector<int32_t> idx(V);
  for (int i = 0; i < V; i++) idx[i] = i;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  for (int i = 0; i < k; i++) ev.top.push_back(TopLogprob{idx[i], z[idx[i]] - lse});
}
}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kAborted: return "aborted";
  }
  return "?";
}

Status Completion::init(const GenRequest& r, const Tokenizer& tok, int V, int budget) {
  req_ = &r;
  tok_ = &tok;
  V_ = V;
  budget_ = budget;
  count_ = 0;
  stream_ = std::make_unique<TextStream>(tok);
  held_.clear();
  history_.clear();
  if (r.repeat_penalty != 1.0f) history_.assign(r.prompt.begin(), r.prompt.end());
  return sampler_.init(r.sampling, V);
}

// Ids the tokenizer cannot decode (a vocabulary padded beyond the tokenizer's) are never chosen.
void Completion::mask_padding(float* z) const {
  for (int i = (int)tok_->vocab_size(); i < V_; i++) z[i] = -std::numeric_limits<float>::infinity();
}

int32_t Completion::sample(float* z) {
  mask_padding(z);
  if (req_->repeat_penalty != 1.0f)
    apply_repeat_penalty(z, V_, history_.data(), (int)history_.size(), req_->repeat_penalty, req_->repeat_last_n);
  return sampler_.sample(z);
}

void Completion::score(const float* z, TokenEvent& ev) const { score_logits(z, V_, req_->logprobs, ev); }

void Completion::score_prompt(float* z, TokenEvent& ev) const {
  mask_padding(z);
  score_logits(z, V_, req_->prompt_logprobs, ev);
}

bool Completion::is_end_of_document(int32_t id) const {
  const auto eod = tok_->eod_id();
  return eod && (uint32_t)id == *eod && !req_->ignore_eos;
}

bool Completion::accept(TokenEvent& ev, GenResult& res, FinishReason& why) {
  if (is_end_of_document(ev.id)) {
    ev.text = held_ + stream_->finish();  // the held tail; the end of document itself is not text
    res.text += ev.text;
    why = FinishReason::kStop;
    return true;
  }
  res.ids.push_back(ev.id);
  if (req_->repeat_penalty != 1.0f) history_.push_back(ev.id);
  const bool at_length = ++count_ >= budget_;
  held_ += stream_->push((uint32_t)ev.id);
  if (at_length) held_ += stream_->finish();
  // The earliest stop string in the held text ends the completion there.
  size_t cut = std::string::npos;
  for (const std::string& st : req_->stop)
    if (!st.empty()) cut = std::min(cut, held_.find(st));
  why = FinishReason::kLength;
  bool done = at_length;
  if (cut != std::string::npos) {
    ev.text = held_.substr(0, cut);
    held_.clear();
    why = FinishReason::kStop;
    done = true;
  } else if (at_length) {
    ev.text = std::move(held_);
    held_.clear();
  } else {
    const size_t keep = stop_prefix_tail(held_, req_->stop);
    ev.text = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
  }
  res.text += ev.text;
  return done;
}

}  // namespace smelt
