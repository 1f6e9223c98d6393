// Tokenizer files: Hugging Face tokenizer.json (byte-level BPE family) and tiktoken rank files in,
// tokenizer.json out. Not encode/decode (tokenizer.cpp, bpe_encode.cpp).
#include <algorithm>
#include <unordered_map>

#include "smelt/common/files.hpp"
#include "smelt/tokenizer/byte_level.hpp"
#include "smelt/tokenizer/tokenizer.hpp"
#include "smelt/tokenizer/tokenizer_impl.hpp"

namespace smelt {

namespace {

using json = nlohmann::json;

bool base64_decode(std::string_view in, std::string& out) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    int v = val(c);
    if (v < 0) return false;
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

// The split patterns and special tokens of OpenAI's encodings (tiktoken_ext/openai_public.py).
std::vector<SpecialToken> tiktoken_specials(const std::string& family, size_t n_ranks) {
  if (family == "o200k") return {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
  if (family == "cl100k")
    return {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
            {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}};
  if (n_ranks == 50256) return {{"<|endoftext|>", 50256}};  // gpt2 / r50k / p50k
  if (n_ranks == 50280) return {{"<|endoftext|>", 50256}};
  return {};
}

// Every split of every token into two tokens, ordered as transformers' TikTokenConverter does
// (by the merged token's rank, then the left and right ranks): the merges a BPE file needs.
// merged[k] is the id merges[k] yields.
void merges_from_ranks(BpeModel& m, const TokenMap& rank, std::vector<uint32_t>& merged) {
  m.merges.clear();
  merged.clear();
  std::vector<std::pair<uint32_t, uint32_t>> local;
  for (uint32_t id = 0; id < m.vocab.size(); id++) {
    std::string_view t = m.vocab[id];
    if (t.size() < 2 || rank.find(t) != id) continue;  // a duplicate's merges belong to its first id
    local.clear();
    for (size_t k = 1; k < t.size(); k++) {
      uint32_t l = rank.find(t.substr(0, k));
      if (l == UINT32_MAX) continue;
      uint32_t r = rank.find(t.substr(k));
      if (r == UINT32_MAX) continue;
      local.emplace_back(l, r);
    }
    std::sort(local.begin(), local.end());
    m.merges.insert(m.merges.end(), local.begin(), local.end());
    merged.insert(merged.end(), local.size(), id);
  }
}

Status load_tiktoken(const std::string& path, const std::string& text, std::string family, Tokenizer& out) {
  BpeModel m;
  size_t pos = 0, line = 0;
  std::string bytes;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string::npos) e = text.size();
    std::string_view l(text.data() + pos, e - pos);
    pos = e + 1;
    line++;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.empty()) continue;
    size_t sp = l.find(' ');
    bytes.clear();
    uint64_t rank = 0;
    bool ok = sp != std::string_view::npos && sp + 1 < l.size() && base64_decode(l.substr(0, sp), bytes) && !bytes.empty();
    for (size_t k = sp + 1; ok && k < l.size(); k++) {
      if (l[k] < '0' || l[k] > '9') ok = false;
      rank = rank * 10 + (l[k] - '0');
      if (rank > 100000000) ok = false;
    }
    if (!ok) return Status::error(path + " line " + std::to_string(line) + ": expected 'BASE64 RANK' (a tiktoken rank file)");
    if (rank >= m.vocab.size()) m.vocab.resize(rank + 1);
    m.vocab[rank] = bytes;
  }
  if (m.vocab.size() < 256) return Status::error(path + ": a tiktoken file needs at least the 256 byte tokens");
  if (family.empty()) {
    std::string base = path.substr(path.find_last_of('/') + 1);
    if (base.find("o200k") != std::string::npos) family = "o200k";
    else if (base.find("cl100k") != std::string::npos) family = "cl100k";
    else if (base.find("r50k") != std::string::npos || base.find("p50k") != std::string::npos ||
             base.find("gpt2") != std::string::npos) family = "gpt2";
    else return Status::error(path + ": cannot tell the split pattern from the file name; give it (cl100k, o200k, gpt2)");
  }
  m.pretokenizer = family;
  m.specials = tiktoken_specials(family, m.vocab.size());
  m.ignore_merges = true;
  m.rank_priority = true;
  TokenMap rank;
  rank.build(m.vocab);
  std::vector<uint32_t> merged;
  merges_from_ranks(m, rank, merged);
  m.info = {{"source", path}, {"format", "tiktoken"}};
  return tokenizer_from_model(std::move(m), &merged, out, &rank);
}

Status load_hf(const std::string& path, const std::string& text, Tokenizer& out) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    return Status::error(path + ": not valid JSON: " + e.what());
  }
  auto fail = [&](const std::string& what) { return Status::error(path + ": " + what); };
  try {
    const json& model = j.at("model");
    if (model.value("type", "BPE") != "BPE") return fail("model.type is '" + model.value("type", "") + "'; only byte-level BPE is supported");
    if (model.contains("byte_fallback") && model["byte_fallback"].is_boolean() && model["byte_fallback"].get<bool>())
      return fail("model.byte_fallback is set (a SentencePiece-style BPE); only byte-level BPE is supported");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (model.contains(k) && !model[k].is_null() && !model[k].get<std::string>().empty())
        return fail(std::string("model.") + k + " is not supported");
    if (j.contains("normalizer") && !j["normalizer"].is_null())
      return fail("normalizer '" + j["normalizer"].value("type", "?") + "' is not supported (byte-level BPE has none)");
    BpeModel m;
    std::unordered_map<std::string, uint32_t> str_id;
    const json& vocab = model.at("vocab");
    str_id.reserve(vocab.size() * 2);
    uint32_t max_id = 0;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) max_id = std::max(max_id, it.value().get<uint32_t>());
    m.vocab.resize(vocab.empty() ? 0 : max_id + 1);
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      uint32_t id = it.value().get<uint32_t>();
      std::string raw;
      if (!byte_level_decode(it.key(), raw)) raw = it.key();  // not in the alphabet: kept as its UTF-8 text
      m.vocab[id] = raw;
      str_id.emplace(it.key(), id);
    }
    const json& merges = model.at("merges");
    m.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); i++) {
      std::string a, b;
      if (merges[i].is_string()) {
        const std::string& s = merges[i].get_ref<const std::string&>();
        size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) return fail("model.merges[" + std::to_string(i) + "]: expected \"a b\"");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        a = merges[i].at(0).get<std::string>();
        b = merges[i].at(1).get<std::string>();
      }
      auto ia = str_id.find(a), ib = str_id.find(b);
      if (ia == str_id.end() || ib == str_id.end()) return fail("model.merges[" + std::to_string(i) + "]: token not in the vocabulary");
      m.merges.emplace_back(ia->second, ib->second);
    }
    m.ignore_merges = model.value("ignore_merges", false);
    // pre-tokenizer: ByteLevel(use_regex) or Sequence[Split(Regex, Isolated), ByteLevel(use_regex=false)]
    const json& pre = j.at("pre_tokenizer");
    auto byte_level_ok = [&](const json& p, bool want_regex) -> Status {
      if (p.value("add_prefix_space", false)) return fail("pre_tokenizer ByteLevel.add_prefix_space=true is not supported");
      if (p.value("use_regex", true) != want_regex) return fail("pre_tokenizer ByteLevel.use_regex is not as expected");
      return Status::ok();
    };
    std::string type = pre.is_null() ? "" : pre.value("type", "");
    if (type == "ByteLevel") {
      if (Status s = byte_level_ok(pre, true); !s) return s;
      m.pretokenizer = "gpt2";
    } else if (type == "Sequence" && pre.at("pretokenizers").size() == 2 &&
               pre["pretokenizers"][0].value("type", "") == "Split" && pre["pretokenizers"][1].value("type", "") == "ByteLevel") {
      const json& sp = pre["pretokenizers"][0];
      if (sp.value("behavior", "") != "Isolated" || sp.value("invert", false))
        return fail("pre_tokenizer Split must have behavior Isolated and invert false");
      if (Status s = byte_level_ok(pre["pretokenizers"][1], false); !s) return s;
      std::string pattern;
      if (sp.at("pattern").contains("Regex")) pattern = sp["pattern"]["Regex"].get<std::string>();
      else return fail("pre_tokenizer Split pattern must be a Regex");
      std::string name = Pretokenizer::name_for_pattern(pattern);
      m.pretokenizer = name.empty() ? pattern : name;
    } else {
      return fail("pre_tokenizer '" + (type.empty() ? std::string("null") : type) +
                  "' is not supported: expected ByteLevel or Sequence[Split(Regex), ByteLevel]");
    }
    if (j.contains("added_tokens") && j["added_tokens"].is_array())
      for (const json& t : j["added_tokens"])
        m.specials.push_back({t.at("content").get<std::string>(), t.at("id").get<uint32_t>(), t.value("special", true)});
    m.info = {{"source", path}, {"format", "tokenizer.json"}};
    std::string info_text;
    if (files_read_small(path + ".info.json", info_text)) {
      try { m.info = json::parse(info_text); } catch (...) {}
    }
    Status s = Tokenizer::from_model(std::move(m), out);
    return s ? s : fail(s.message());
  } catch (const std::exception& e) {
    return fail(std::string("unexpected tokenizer.json structure: ") + e.what());
  }
}

}  // namespace

Status Tokenizer::load(const std::string& path, Tokenizer& out, const std::string& tiktoken_pattern) {
  std::string text;
  if (Status s = files_read_small(path, text); !s) return s;
  size_t k = text.find_first_not_of(" \t\r\n");
  if (k != std::string::npos && text[k] == '{') return load_hf(path, text, out);
  return load_tiktoken(path, text, tiktoken_pattern, out);
}

std::string Tokenizer::to_hf_json() const {
  const BpeModel& m = impl_->model;
  json vocab = json::object();
  std::vector<std::string> str(m.vocab.size());
  for (uint32_t id = 0; id < m.vocab.size(); id++) {
    if (m.vocab[id].empty()) continue;
    str[id] = byte_level_encode(m.vocab[id]);
    if (!vocab.contains(str[id])) vocab[str[id]] = id;
  }
  json merges = json::array();
  for (auto [a, b] : m.merges) merges.push_back(json::array({str[a], str[b]}));
  json added = json::array();
  for (const auto& s : m.specials)
    added.push_back({{"id", s.id}, {"content", s.text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", !s.special}, {"special", s.special}});
  json pre;
  if (impl_->pre->name() == "gpt2") {
    pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  } else {
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            json::array({{{"type", "Split"}, {"pattern", {{"Regex", impl_->pre->pattern()}}}, {"behavior", "Isolated"}, {"invert", false}},
                         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}};
  }
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", pre},
            {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
            {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
            {"model",
             {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
              {"ignore_merges", m.ignore_merges}, {"vocab", vocab}, {"merges", merges}}}};
  return j.dump();
}

Status Tokenizer::save_hf(const std::string& path) const {
  if (Status s = files_write_atomic(path, to_hf_json()); !s) return s;
  const json& info = impl_->model.info;
  if (info.is_object() && !info.empty())
    return files_write_atomic(path + ".info.json", info.dump(2) + "\n");
  return Status::ok();
}

}  // namespace smelt
