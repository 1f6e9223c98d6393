// Tokenizer: special tokens, pre-tokenizer and BPE put together (encode), ids back to bytes
// (decode), and the derived tables. Files are read and written in tokenizer_io.cpp.
#include "smelt/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "smelt/common/hash.hpp"
#include "smelt/tokenizer/tokenizer_impl.hpp"

namespace smelt {

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Status tokenizer_build(Tokenizer::Impl& im, const std::vector<uint32_t>* merged_ids, TokenMap* tokens) {
  BpeModel& m = im.model;
  Status err;
  im.pre = Pretokenizer::create(m.pretokenizer, err);
  if (!im.pre) return err;
  if (m.vocab.size() > PairMap::kMaxId + 1)
    return Status::error("a vocabulary of " + std::to_string(m.vocab.size()) + " ids is over the " +
                         std::to_string(PairMap::kMaxId + 1) + " the merge table holds");
  if (!m.rank_priority && m.merges.size() > PairMap::kMaxPriority + 1)
    return Status::error(std::to_string(m.merges.size()) + " merges are over the " + std::to_string(PairMap::kMaxPriority + 1) +
                         " the merge table holds");
  const uint32_t nv = static_cast<uint32_t>(m.vocab.size());
  BpeTables& t = im.bpe;
  t.ignore_merges = m.ignore_merges;
  if (tokens) t.tokens = std::move(*tokens);
  else t.tokens.build(m.vocab);
  t.max_token_bytes = 0;
  for (const auto& v : m.vocab) t.max_token_bytes = std::max(t.max_token_bytes, v.size());
  for (int b = 0; b < 256; b++) t.byte_id[b] = t.tokens.find(std::string(1, static_cast<char>(b)));
  t.pairs = PairMap();
  t.pairs.reserve(m.merges.size());
  std::string cat;
  for (size_t i = 0; i < m.merges.size(); i++) {
    if (i + 16 < m.merges.size())  // inserts miss the cache: ask ahead
      t.pairs.prefetch(PairMap::hash(m.merges[i + 16].first, m.merges[i + 16].second));
    auto [a, b] = m.merges[i];
    if (a >= nv || b >= nv || m.vocab[a].empty() || m.vocab[b].empty())
      return Status::error("merge " + std::to_string(i) + " refers to an id outside the vocabulary");
    uint32_t merged;
    if (merged_ids) {
      merged = (*merged_ids)[i];
    } else {
      cat = m.vocab[a];
      cat += m.vocab[b];
      merged = t.tokens.find(cat);
    }
    if (merged == UINT32_MAX)
      return Status::error("merge " + std::to_string(i) + " (" + std::to_string(a) + ", " + std::to_string(b) +
                           ") yields a token that is not in the vocabulary");
    t.pairs.insert(a, b, m.rank_priority ? merged : static_cast<uint32_t>(i), merged);
  }
  im.vocab_size = nv;
  im.id_text.assign(m.vocab.begin(), m.vocab.end());
  for (const auto& s : m.specials) {
    if (s.text.empty()) return Status::error("an added token has empty content");
    im.vocab_size = std::max(im.vocab_size, s.id + 1);
    if (s.id >= im.id_text.size()) im.id_text.resize(s.id + 1);
    im.id_text[s.id] = s.text;
  }
  im.specials_by_length = m.specials;
  std::stable_sort(im.specials_by_length.begin(), im.specials_by_length.end(),
                   [](const SpecialToken& a, const SpecialToken& b) { return a.text.size() > b.text.size(); });
  std::memset(im.special_first_byte, 0, sizeof im.special_first_byte);
  for (const auto& s : m.specials) im.special_first_byte[static_cast<unsigned char>(s.text[0])] = true;

  uint64_t h = hash64(im.pre->pattern(), 0x5e17);
  for (const auto& v : m.vocab) h = hash_mix(h ^ hash64(v, v.size()));
  for (auto [a, b] : m.merges) h = hash_mix(h ^ ((static_cast<uint64_t>(a) << 32) | b));
  for (const auto& s : m.specials) h = hash_mix(h ^ hash64(s.text, s.id * 2 + s.special));
  h = hash_mix(h ^ (m.ignore_merges ? 1 : 2) ^ (m.rank_priority ? 4 : 8));
  im.hash = h;
  return Status::ok();
}

Status tokenizer_from_model(BpeModel model, const std::vector<uint32_t>* merged, Tokenizer& out, TokenMap* tokens) {
  static std::atomic<uint64_t> serial{0};
  auto im = std::make_unique<Tokenizer::Impl>();
  im->model = std::move(model);
  if (Status s = tokenizer_build(*im, merged, tokens); !s) return s;
  im->serial = ++serial;
  im->bpe.serial = im->serial;
  out.impl_ = std::move(im);
  return Status::ok();
}

Status Tokenizer::from_model(BpeModel model, Tokenizer& out) { return tokenizer_from_model(std::move(model), nullptr, out); }

namespace {

// A per-thread, direct-mapped cache of piece -> ids for short pieces (words repeat: most lookups
// hit), one 64-byte line per entry. Keyed by the tokenizer's serial so tokenizers never mix.
struct PieceCache {
  static constexpr size_t kSlots = 1 << 14, kMaxBytes = 30, kMaxIds = 6;
  struct alignas(64) Slot {
    uint64_t tag;  // hash | 1; 0: empty
    uint8_t len, nids;
    char bytes[kMaxBytes];
    uint32_t ids[kMaxIds];
  };
  uint64_t serial = 0;
  std::vector<Slot> slots;
};
static_assert(sizeof(PieceCache::Slot) == 64);

void encode_ordinary(const Tokenizer::Impl& im, std::string_view text, std::vector<uint32_t>& out) {
  thread_local std::vector<std::string_view> pieces;
  thread_local PieceCache cache;
  if (cache.serial != im.serial) {
    cache.slots.assign(PieceCache::kSlots, PieceCache::Slot{});
    cache.serial = im.serial;
  }
  pieces.clear();
  im.pre->split(text, pieces);
  for (std::string_view p : pieces) {
    if (p.size() == 1) {
      uint32_t id = im.bpe.byte_id[static_cast<unsigned char>(p[0])];
      if (id != UINT32_MAX) out.push_back(id);
      continue;
    }
    if (p.size() > PieceCache::kMaxBytes) {
      bpe_encode_piece(im.bpe, p, out);
      continue;
    }
    uint64_t h = bpe_bytes_hash(p.data(), p.size()) | 1;
    PieceCache::Slot& s = cache.slots[(h >> 7) & (PieceCache::kSlots - 1)];
    if (s.tag == h && s.len == p.size() && bpe_bytes_equal(s.bytes, p.data(), p.size())) {
      out.insert(out.end(), s.ids, s.ids + s.nids);
      continue;
    }
    size_t before = out.size();
    bpe_encode_piece(im.bpe, p, out);
    size_t n = out.size() - before;
    if (n <= PieceCache::kMaxIds) {
      s.tag = h;
      s.len = static_cast<uint8_t>(p.size());
      s.nids = static_cast<uint8_t>(n);
      std::memcpy(s.bytes, p.data(), p.size());
      std::memcpy(s.ids, out.data() + before, n * sizeof(uint32_t));
    }
  }
}

}  // namespace

void Tokenizer::encode(std::string_view text, std::vector<uint32_t>& out, bool allow_special) const {
  const Impl& im = *impl_;
  if (!im.pre) return;  // an empty Tokenizer (nothing loaded) encodes nothing
  if (!allow_special || im.specials_by_length.empty()) {
    encode_ordinary(im, text, out);
    return;
  }
  size_t start = 0, i = 0;
  while (i < text.size()) {
    if (!im.special_first_byte[static_cast<unsigned char>(text[i])]) { i++; continue; }
    const SpecialToken* hit = nullptr;
    for (const auto& s : im.specials_by_length)
      if (text.compare(i, s.text.size(), s.text) == 0) { hit = &s; break; }
    if (!hit) { i++; continue; }
    if (i > start) encode_ordinary(im, text.substr(start, i - start), out);
    out.push_back(hit->id);
    i += hit->text.size();
    start = i;
  }
  if (start < text.size()) encode_ordinary(im, text.substr(start), out);
}

void Tokenizer::decode(const uint32_t* ids, size_t n, std::string& out) const {
  const auto& t = impl_->id_text;
  for (size_t k = 0; k < n; k++)
    if (ids[k] < t.size()) out += t[ids[k]];
}

uint32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const auto& s : impl_->model.specials)
    if (s.text == token) return s.id;
  uint32_t id = impl_->bpe.tokens.find(token);
  if (id == UINT32_MAX) return std::nullopt;
  return id;
}

std::optional<uint32_t> Tokenizer::eod_id() const {
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "<|im_end|>", "</s>", "<eos>", "<|eot_id|>"})
    for (const auto& s : impl_->model.specials)
      if (s.text == name) return s.id;
  return std::nullopt;
}

const BpeModel& Tokenizer::model() const { return impl_->model; }
uint64_t Tokenizer::content_hash() const { return impl_->hash; }
const Pretokenizer& Tokenizer::pretokenizer() const { return *impl_->pre; }

}  // namespace smelt
