// global_dedup.hpp on real text (tests/data): a corpus with planted exact copies, near copies,
// records of the same page and chains, spread over files so duplicates cross input tasks, checked
// against a one-process reference written here (keys from dedup_signature and page_key, a std::map
// union-find). Then: one output for any split, refusals by name, restart, the CLI's Slurm recipe.
// Not the signature itself (dedup_test.cpp), nor a speed test.
#include "smelt/refine/global_dedup.hpp"

#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/common/files.hpp"
#include "smelt/common/page_key.hpp"
#include "smelt/common/utf8.hpp"
#include "smelt/text/byte_stream.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

#define GD_ASSERT_OK(expr)                               \
  do {                                                   \
    const ::smelt::Status st_ = (expr);                  \
    ASSERT_TRUE(st_.is_ok()) << #expr ": " << st_.message(); \
  } while (0)

namespace {

const std::string kSmelt = SMELT_BINARY;

// ---- real text: sentences of the dedup and tokenizer test documents

// Basic and extension-A ideographs: the corpus keeps its Chinese far above the 30% line and its
// English free of them, so the test does not depend on where a range ends.
bool han(char32_t c) { return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF); }

bool space(char32_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Han code points and non-space code points of s.
std::pair<size_t, size_t> han_count(std::string_view s) {
  size_t h = 0, all = 0;
  for (size_t i = 0; i < s.size();) {
    char32_t c = utf8_next(s, i);
    if (space(c)) continue;
    ++all;
    h += han(c);
  }
  return {h, all};
}

// Sentences of a text: paragraphs (blank lines) with their lines joined (English by a space,
// Chinese directly: its line breaks fall inside sentences), cut after . ? ! before a space
// (English) or after 。！？ (Chinese). Short and markup-only pieces are left out.
std::vector<std::string> sentences_of(std::string text, bool zh) {
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::string cur;
  auto flush = [&] {
    size_t a = cur.find_first_not_of(" \t"), b = cur.find_last_not_of(" \t");
    std::string s = a == std::string::npos ? "" : cur.substr(a, b - a + 1);
    cur.clear();
    bool keep;
    if (zh) {
      auto [h, all] = han_count(s);
      keep = h >= 8 && h * 10 >= all * 6;
    } else {
      std::istringstream in(s);
      size_t words = 0;
      for (std::string w; in >> w;) words += std::isalpha(static_cast<unsigned char>(w[0])) != 0;
      keep = words >= 6 && han_count(s).first == 0;
    }
    if (keep && seen.insert(s).second) out.push_back(s);
  };
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "\n\n") == 0) {
      flush();
      i += 2;
      continue;
    }
    char32_t c = utf8_next(text, i);
    if (c == '\n' || c == '\r') {
      if (!zh) cur += ' ';
      continue;
    }
    utf8_append(c, cur);
    bool end = zh ? (c == U'。' || c == U'！' || c == U'？')
                  : ((c == '.' || c == '?' || c == '!') && (i >= text.size() || text[i] == ' ' || text[i] == '\n'));
    if (end) flush();
  }
  flush();
  return out;
}

std::string read_data(const std::string& rel) {
  std::string s = test::read_file(std::string(SMELT_TEST_DATA) + "/" + rel);
  EXPECT_FALSE(s.empty()) << rel;
  return s;
}

struct Text {
  std::vector<std::string> en, zh;  // sentences
  std::vector<std::string> words;   // English words to edit with (another document's)
  std::vector<char32_t> hans;       // Han characters to edit with (another document's)
};

const Text& text_pool() {
  static const Text t = [] {
    Text t;
    for (const char* f : {"dedup/en_kernel_howto.txt", "tokenizer/english.txt", "quality/en_prose.txt"})
      for (std::string& s : sentences_of(read_data(f), false)) t.en.push_back(std::move(s));
    for (const char* f : {"dedup/zh_kernel_howto.txt", "tokenizer/chinese.txt", "quality/zh_prose.txt"})
      for (std::string& s : sentences_of(read_data(f), true)) t.zh.push_back(std::move(s));
    std::istringstream in(read_data("dedup/en_python_floatingpoint.txt"));
    for (std::string w; in >> w;)
      if (w.size() >= 3 && std::all_of(w.begin(), w.end(), [](char ch) { return std::isalpha((unsigned char)ch); }))
        t.words.push_back(w);
    std::string zh = read_data("dedup/zh_kernel_management_style.txt");
    for (size_t i = 0; i < zh.size();)
      if (char32_t c = utf8_next(zh, i); han(c)) t.hans.push_back(c);
    return t;
  }();
  return t;
}

// Documents made from the pool with one seeded generator (std::mt19937_64 is the same everywhere;
// the distributions of <random> are not, so draws are taken modulo).
struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  size_t pick(size_t n) { return static_cast<size_t>(rng() % n); }
  bool chance(double p) { return static_cast<double>(rng() >> 11) * 0x1.0p-53 < p; }

  // 3 to 7 sentences in a row of a random place in the pool, or drawn one by one.
  std::string text(bool zh) {
    const std::vector<std::string>& pool = zh ? text_pool().zh : text_pool().en;
    const size_t k = 3 + pick(5);
    const bool run = chance(0.5);
    const size_t at = pick(pool.size() - k);
    std::string out;
    for (size_t i = 0; i < k; ++i) {
      if (i && !zh) out += ' ';
      out += pool[run ? at + i : pick(pool.size())];
    }
    return out;
  }

  // The same tokens dressed differently (an exact copy after normalisation): ASCII case toggled,
  // some letters and digits in full-width form (NFKC folds them back), whitespace runs changed,
  // spaces between Han characters (each is a token of its own).
  std::string restyle(const std::string& t) {
    std::string out = "\n ";
    char32_t prev = 0;
    for (size_t i = 0; i < t.size();) {
      char32_t c = utf8_next(t, i);
      if (space(c)) {
        out += chance(0.5) ? "  " : " \n\t";
        prev = c;
        continue;
      }
      if (c < 128 && std::isalpha(static_cast<int>(c)) && chance(0.3)) c ^= 0x20;
      if (c < 128 && std::isalnum(static_cast<int>(c)) && chance(0.05)) c = 0xFF00 + (c - 0x20);
      if (han(prev) && han(c) && chance(0.1)) out += ' ';
      utf8_append(c, out);
      prev = c;
    }
    return out + "  ";
  }

  // A near copy: each English word (each Han character) replaced with probability p by one of
  // another document.
  std::string edit(const std::string& t, bool zh, double p) {
    const Text& pool = text_pool();
    std::string out;
    if (zh) {
      for (size_t i = 0; i < t.size();) {
        char32_t c = utf8_next(t, i);
        if (han(c) && chance(p)) c = pool.hans[pick(pool.hans.size())];
        utf8_append(c, out);
      }
      return out;
    }
    std::istringstream in(t);
    for (std::string w; in >> w;) {
      if (!out.empty()) out += ' ';
      out += chance(p) ? pool.words[pick(pool.words.size())] : w;
    }
    return out;
  }
};

// Another spelling of the same page: scheme and host in capitals, a port, a fragment.
std::string same_page(const std::string& url, int k) {
  size_t host = url.find("://") + 3, path = url.find('/', host);
  std::string out;
  for (size_t i = 0; i < path; ++i) out += static_cast<char>(std::toupper(static_cast<unsigned char>(url[i])));
  return out + ":8080" + url.substr(path) + "#part-" + std::to_string(k);
}

// ---- the corpus

using Files = std::vector<std::vector<json>>;  // [input file index] records in file order

// The language marked three ways, so Chinese is found by quality.lang, lang or its Han share.
json record(const std::string& id, const std::string& text, std::optional<std::string> url, bool zh, int lang_style) {
  json j = {{"id", id}, {"text", text}, {"source", "smelt-test"}};
  if (url) j["url"] = *url;
  const char* lang = zh ? "zh" : "en";
  if (lang_style % 3 == 0) j["quality"] = {{"lang", lang}, {"score", 0.25 * (lang_style % 4)}};
  if (lang_style % 3 == 1) j["lang"] = lang;
  if (lang_style % 3 == 2) j["quality"] = {{"score", 0.5}};
  return j;
}

std::string text_of(const json& j) { return j["text"].get<std::string>(); }
std::string id_of(const json& j) { return j["id"].get<std::string>(); }
bool is_zh(const json& j) { return han_count(text_of(j)).first > 0; }
int lang_style_of(const json& j) {
  if (j.contains("lang")) return 1;
  return j["quality"].contains("lang") ? 0 : 2;
}

// About 400 documents in 7 files: unique documents (a quarter Chinese; some without url, some
// with an empty one), exact copies, near copies (3% edited), mostly English documents marked zh
// beside their near copies unmarked (character shingles on one side only: not linked), other
// texts of the same page, chains exact->url and near->near, punctuation-only twins (no tokens: no
// keys), all shuffled over files 0-5; file 6 holds only exact copies of earlier documents, so it
// keeps nothing. A copy marks its language another way than its original.
Files make_corpus() {
  Gen g(20261204);
  std::vector<json> docs, bases;
  for (int n = 0; n < 250; ++n) {
    const bool zh = n % 4 == 3;
    std::optional<std::string> url = "https://site" + std::to_string(n % 7) + ".example.org/page/" + std::to_string(n);
    if (n % 10 == 9) url.reset();
    if (n % 10 == 8) url = "";
    bases.push_back(record("u" + std::to_string(n), g.text(zh), url, zh, n / 4));
  }
  docs = bases;
  std::vector<size_t> order(bases.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[g.pick(i + 1)]);
  size_t next = 0;
  auto take = [&](bool with_url) -> const json& {
    while (with_url && bases[order[next]].value("url", "").empty()) ++next;
    return bases[order[next++]];
  };
  auto fresh_url = [](const std::string& what, int k) {
    return "https://" + what + ".example.net/" + std::to_string(k);
  };
  for (int k = 0; k < 30; ++k) {  // exact copies (every fifth twice), a third on the same page as well
    const json& b = take(false);
    const bool zh = is_zh(b);
    const std::string url = b.value("url", "");
    for (int copy = 0; copy < (k % 5 == 0 ? 2 : 1); ++copy)
      docs.push_back(record(id_of(b) + "-x" + std::to_string(copy), g.restyle(text_of(b)),
                            k % 3 == 0 && !url.empty() ? same_page(url, k) : fresh_url("copy", k * 2 + copy), zh,
                            lang_style_of(b) + 1 + copy));
  }
  for (int k = 0; k < 30; ++k) {  // near copies
    const json& b = take(false);
    const bool zh = is_zh(b);
    docs.push_back(record(id_of(b) + "-n", g.edit(text_of(b), zh, 0.03), fresh_url("near", k), zh,
                          lang_style_of(b) + 1));
  }
  for (int k = 0; k < 6; ++k) {  // Chinese by its lang field alone (Han < 30%); its near copy, unmarked, is not
    const std::string t = text_pool().zh[g.pick(text_pool().zh.size())] + " " + g.text(false);
    docs.push_back(record("m" + std::to_string(k), t, fresh_url("mixed", k), true, k % 2));
    docs.push_back(record("m" + std::to_string(k) + "-n", g.edit(t, false, 0.02), fresh_url("mixed-n", k), false, 2));
  }
  for (int k = 0; k < 15; ++k) {  // another text of the same page
    const json& b = take(true);
    const bool zh = k % 3 == 0;
    docs.push_back(record(id_of(b) + "-p", g.text(zh), same_page(b["url"].get<std::string>(), k), zh, k));
  }
  for (int k = 0; k < 8; ++k) {  // chains A =exact= B =url= C, A and C sharing nothing
    const json& a = take(false);
    const bool zh = is_zh(a);
    const std::string b_url = fresh_url("chain", k);
    docs.push_back(record(id_of(a) + "-cb", g.restyle(text_of(a)), b_url, zh, lang_style_of(a) + 1));
    docs.push_back(record(id_of(a) + "-cc", g.text(!zh), same_page(b_url, k), !zh, k));
  }
  for (int k = 0; k < 8; ++k) {  // chains A ~near~ B ~near~ C
    const json& a = take(false);
    const bool zh = is_zh(a);
    std::string b = g.edit(text_of(a), zh, 0.03), c = g.edit(b, zh, 0.03);
    docs.push_back(record(id_of(a) + "-nb", b, fresh_url("nchain-b", k), zh, lang_style_of(a) + 1));
    docs.push_back(record(id_of(a) + "-nc", c, fresh_url("nchain-c", k), zh, lang_style_of(a) + 2));
  }
  for (int k = 0; k < 3; ++k)  // no tokens: exact hash 0, no keys, never duplicates of each other
    docs.push_back(record("punct" + std::to_string(k), "... -- !!! ??? ***", fresh_url("punct", k), false, k));
  for (size_t i = docs.size() - 1; i > 0; --i) std::swap(docs[i], docs[g.pick(i + 1)]);
  Files files(7);
  const double cuts[6] = {0.12, 0.30, 0.45, 0.62, 0.80, 1.0};
  for (size_t i = 0, f = 0; i < docs.size(); ++i) {
    while (static_cast<double>(i) >= cuts[f] * static_cast<double>(docs.size())) ++f;
    files[f].push_back(docs[i]);
  }
  for (int k = 0; k < 10; ++k) {
    const json& b = take(false);
    files[6].push_back(record(id_of(b) + "-late", g.restyle(text_of(b)), fresh_url("late", k),
                              is_zh(b), lang_style_of(b) + 2));
  }
  return files;
}

std::string zstd_frame(const std::string& s) {
  std::string out(ZSTD_compressBound(s.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), s.data(), s.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

// dNN.jsonl, odd files compressed (dNN.jsonl.zst): sorted names are the file order.
void write_files(const fs::path& dir, const Files& files) {
  fs::create_directories(dir);
  for (size_t f = 0; f < files.size(); ++f) {
    std::string lines;
    for (const json& j : files[f]) lines += j.dump() + "\n";
    char name[32];
    std::snprintf(name, sizeof name, "d%02zu.jsonl%s", f, f % 2 ? ".zst" : "");
    test::write_file((dir / name).string(), f % 2 ? zstd_frame(lines) : lines);
  }
}

// ---- the one-process reference

struct Expected {
  std::set<uint64_t> dropped;
  std::map<uint64_t, uint64_t> survivor;  // [dropped id] the smallest id of its component
  uint64_t documents = 0, components = 0, exact = 0, url = 0, near = 0, largest = 0;
  std::vector<std::vector<json>> kept;  // [file] kept records in order
  uint64_t cross_task(int tasks) const {
    uint64_t n = 0;
    for (const auto& [d, s] : survivor) n += gd_doc_file(d) % tasks != gd_doc_file(s) % tasks;
    return n;
  }
};

// The contract's Chinese test: quality.lang or lang says zh, else Han is >= 30% of the non-space
// code points.
bool ref_cjk(const json& j) {
  if (j.contains("quality") && j["quality"].value("lang", "") == "zh") return true;
  if (j.value("lang", "") == "zh") return true;
  auto [h, all] = han_count(text_of(j));
  return all > 0 && h * 10 >= all * 3;
}

Expected reference(const Files& files, const GlobalDedupConfig& c) {
  Expected e;
  // (kind: 0 exact, 1 url, 2 + j band j; hash; page) -> documents holding that key
  std::map<std::tuple<int, uint64_t, std::string>, std::vector<uint64_t>> groups;
  std::map<uint64_t, uint64_t> parent;
  DedupSignature sig;
  for (size_t f = 0; f < files.size(); ++f)
    for (size_t r = 0; r < files[f].size(); ++r) {
      const json& j = files[f][r];
      const uint64_t id = gd_doc_id(f, r);
      parent[id] = id;
      ++e.documents;
      dedup_signature(text_of(j), ref_cjk(j), c.dedup, sig);
      if (sig.exact != 0) {
        if (c.dedup.exact) groups[{0, sig.exact, ""}].push_back(id);
        for (size_t b = 0; c.dedup.near && b < sig.bands.size(); ++b)
          groups[{2 + static_cast<int>(b), sig.bands[b], ""}].push_back(id);
      }
      const std::string url = j.value("url", "");
      if (c.url && !url.empty()) groups[{1, 0, page_key(url, "")}].push_back(id);
    }
  auto find = [&](uint64_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::map<uint64_t, int> strongest;  // [id] 0 exact, 1 url, 2 near
  for (const auto& [key, ids] : groups) {
    if (ids.size() < 2) continue;
    const int kind = std::min(std::get<0>(key), 2);
    for (uint64_t id : ids) {
      if (auto [it, fresh] = strongest.emplace(id, kind); !fresh) it->second = std::min(it->second, kind);
      uint64_t a = find(ids[0]), b = find(id);
      if (a != b) parent[std::max(a, b)] = std::min(a, b);  // the root is the smallest id
    }
  }
  std::map<uint64_t, uint64_t> size;
  e.kept.resize(files.size());
  for (size_t f = 0; f < files.size(); ++f)
    for (size_t r = 0; r < files[f].size(); ++r) {
      const uint64_t id = gd_doc_id(f, r), root = find(id);
      ++size[root];
      if (root == id) {
        e.kept[f].push_back(files[f][r]);
        continue;
      }
      e.dropped.insert(id);
      e.survivor[id] = root;
      const int k = strongest.at(id);
      (k == 0 ? e.exact : k == 1 ? e.url : e.near) += 1;
    }
  for (const auto& [root, n] : size) {
    e.components += n > 1;
    e.largest = std::max(e.largest, n);
  }
  return e;
}

// ---- outputs

// Every regular file under dir: relative path -> bytes.
std::map<std::string, std::string> tree_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = test::read_file(e.path().string());
  return out;
}

std::vector<json> records_of(const std::string& path) {
  Status st;
  std::unique_ptr<ByteStream> in = byte_stream_open(path, st);
  EXPECT_TRUE(st.is_ok() && in) << st.message();
  std::string text;
  char buf[65536];
  for (size_t n; in && (n = in->read(buf, sizeof buf)) > 0;) text.append(buf, n);
  EXPECT_TRUE(!in || in->error().empty()) << path << ": " << in->error();
  std::vector<json> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) out.push_back(json::parse(line));
  return out;
}

// The part's records against the kept input records: the same ids in the same order, then each
// record field by field (a mismatch prints the JSON patch from the input record to the output's).
void expect_records(const std::vector<json>& got, const std::vector<json>& want, const std::string& where) {
  auto ids = [](const std::vector<json>& v) {
    std::vector<std::string> out;
    for (const json& j : v) out.push_back(j.value("id", "?"));
    return out;
  };
  ASSERT_EQ(ids(got), ids(want)) << where;
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    json w = want[i];
    if (w.contains("url") && w["url"] == "") w.erase("url");  // the output carries a url only when it has one
    if (got[i] != w && bad++ < 3)
      first += "\n  record " + std::to_string(i) + " (" + id_of(w) + "): " + json::diff(w, got[i]).dump();
  }
  EXPECT_EQ(bad, 0u) << where << ": records differing from the input; the JSON patch from input to output of the first:"
                     << first;
}

std::string part_name(size_t f) {
  char name[40];
  std::snprintf(name, sizeof name, "part-%05zu.jsonl.zst", f);
  return name;
}

std::vector<uint64_t> drops_of(const GlobalDedupConfig& c) {
  std::vector<uint64_t> ids;
  Status st = gd_read_drops(c, ids);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return ids;
}

// The file under dir with the most bytes that is not a JSON marker: one with records, so its
// middle byte is inside a record.
fs::path largest_data_file(const fs::path& dir) {
  fs::path best;
  uintmax_t size = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() != ".json" && e.file_size() > size) {
      best = e.path();
      size = e.file_size();
    }
  EXPECT_FALSE(best.empty()) << "no data file under " << dir;
  return best;
}

void flip_middle_byte(const fs::path& p) {
  std::string b = test::read_file(p.string());
  b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 0x5A);
  test::write_file(p.string(), b);
}

int shell(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

class GlobalDedupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_global_dedup_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // Work and output folders named after the variant; the corpus under in/.
  GlobalDedupConfig config(const std::string& name) const {
    GlobalDedupConfig c;
    c.inputs = {(dir_ / "in").string()};
    c.work = (dir_ / ("w-" + name)).string();
    c.output = (dir_ / ("o-" + name)).string();
    c.dedup.cjk_shingle = 3;  // unlike words (5): a document judged Chinese by the wrong rule gets other bands
    c.tasks = 3;
    c.buckets = 4;
    c.threads = 2;
    return c;
  }
  Files corpus() {
    Files files = make_corpus();
    write_files(dir_ / "in", files);
    return files;
  }
  fs::path dir_;
};

// ---- 1. the reference

TEST_F(GlobalDedupTest, DropsEveryComponentMemberButItsSmallestIdAsTheReference) {
  const Files files = corpus();
  std::vector<std::string> expanded;
  GD_ASSERT_OK(files_expand_inputs({(dir_ / "in").string()}, expanded));
  ASSERT_EQ(expanded.size(), files.size());
  for (size_t f = 0; f < files.size(); ++f)
    EXPECT_EQ(fs::path(expanded[f]).filename().string().substr(0, 3), "d0" + std::to_string(f));

  struct Variant {
    const char* name;
    bool exact, near, url;
  };
  for (const Variant& v : {Variant{"all", true, true, true}, Variant{"no-url", true, true, false},
                           Variant{"no-near", true, false, true}, Variant{"no-exact", false, true, true}}) {
    SCOPED_TRACE(v.name);
    GlobalDedupConfig c = config(v.name);
    c.dedup.exact = v.exact;
    c.dedup.near = v.near;
    c.url = v.url;
    const Expected e = reference(files, c);
    if (std::string(v.name) == "all") {  // the corpus holds what it was built to hold
      EXPECT_GE(e.exact, 30u);
      EXPECT_GE(e.url, 15u);
      EXPECT_GE(e.near, 20u);
      EXPECT_GE(e.largest, 3u);
      EXPECT_GT(e.cross_task(3), 0u);
      EXPECT_TRUE(e.kept[6].empty());
    }
    GlobalDedupSummary s;
    GD_ASSERT_OK(gd_run(c, s));
    EXPECT_EQ(drops_of(c), std::vector<uint64_t>(e.dropped.begin(), e.dropped.end()));
    EXPECT_EQ(s.documents, e.documents);
    EXPECT_EQ(s.dropped, e.dropped.size());
    EXPECT_EQ(s.kept, e.documents - e.dropped.size());
    EXPECT_EQ(s.dropped_exact, e.exact);
    EXPECT_EQ(s.dropped_url, e.url);
    EXPECT_EQ(s.dropped_near, e.near);
    EXPECT_EQ(s.components, e.components);
    EXPECT_EQ(s.dropped_cross_task, e.cross_task(c.tasks));
    // one part per input file that keeps a document, holding its kept records in input order
    std::set<std::string> parts, want;
    for (const auto& [name, bytes] : tree_of(c.output))
      if (name.rfind("part-", 0) == 0) parts.insert(name);
    for (size_t f = 0; f < files.size(); ++f) {
      if (e.kept[f].empty()) continue;
      want.insert(part_name(f));
      expect_records(records_of(c.output + "/" + part_name(f)), e.kept[f], part_name(f));
    }
    EXPECT_EQ(parts, want);
  }
}

// ---- 2. one output for any split

TEST_F(GlobalDedupTest, SameOutputForAnyTasksBucketsThreadsAndMemory) {
  const Files files = corpus();
  std::map<std::string, std::string> first;
  std::vector<uint64_t> first_drops;
  for (int tasks : {1, 2, 3})
    for (int buckets : {1, 5})
      for (bool tiny : {false, true}) {
        const std::string name = "t" + std::to_string(tasks) + "-b" + std::to_string(buckets) + (tiny ? "-tiny" : "");
        SCOPED_TRACE(name);
        GlobalDedupConfig c = config(name);
        c.tasks = tasks;
        c.buckets = buckets;
        c.threads = (tasks + buckets) % 2 ? 1 : 4;
        c.memory_bytes = tiny ? 4096 : 1ull << 30;
        if (tiny) {  // stage by stage, to see the buckets stage spill
          GlobalDedupSummary sig, buck, clus, merge, filt;
          GD_ASSERT_OK(gd_signatures(c, -1, sig));
          GD_ASSERT_OK(gd_buckets(c, -1, buck));
          EXPECT_GT(buck.spilled_runs, 0u);
          GD_ASSERT_OK(gd_cluster(c, -1, clus));
          GD_ASSERT_OK(gd_cluster_merge(c, merge));
          GD_ASSERT_OK(gd_filter(c, -1, filt));
        } else {
          GlobalDedupSummary s;
          GD_ASSERT_OK(gd_run(c, s));
          EXPECT_EQ(s.dropped_cross_task, reference(files, c).cross_task(tasks));
          if (tasks == 1) EXPECT_EQ(s.dropped_cross_task, 0u);
          else EXPECT_GT(s.dropped_cross_task, 0u);
        }
        std::map<std::string, std::string> out = tree_of(c.output);
        if (first.empty()) {
          first = out;
          first_drops = drops_of(c);
          ASSERT_GE(first.size(), 6u);
          continue;
        }
        EXPECT_EQ(drops_of(c), first_drops);
        ASSERT_EQ(out.size(), first.size());
        for (const auto& [path, bytes] : first) EXPECT_TRUE(out[path] == bytes) << path << " differs";
      }
}

// ---- 3. transitive clusters, unlike prep's streaming index

TEST_F(GlobalDedupTest, ChainDropsTheWholeComponentUnlikeTheStreamingIndex) {
  const DedupConfig d;
  auto sig = [&](const std::string& t) {
    DedupSignature s;
    dedup_signature(t, false, d, s);
    return s;
  };
  auto band_shared = [](const DedupSignature& x, const DedupSignature& y) {
    for (size_t j = 0; j < x.bands.size(); ++j)
      if (x.bands[j] == y.bands[j]) return true;
    return false;
  };
  const std::vector<std::string>& en = text_pool().en;
  std::string a;
  for (size_t i = 40; i < 48; ++i) a += (i > 40 ? " " : "") + en[i];
  // near chain: B edits A, C edits B; searched until A~B and B~C share a band and A, C share none
  std::string b, c;
  for (uint64_t seed = 1; seed < 300 && c.empty(); ++seed) {
    Gen g(seed);
    std::string b1 = g.edit(a, false, 0.03), c1 = g.edit(b1, false, 0.03);
    DedupSignature sa = sig(a), sb = sig(b1), sc = sig(c1);
    if (sa.exact != sb.exact && sb.exact != sc.exact && sa.exact != sc.exact && band_shared(sa, sb) &&
        band_shared(sb, sc) && !band_shared(sa, sc)) {
      b = b1;
      c = c1;
    }
  }
  ASSERT_FALSE(c.empty()) << "no near chain among 300 seeds";
  // exact then url: B2 restyles A2 (same page as nothing), C2 is other text on B2's page
  Gen g(7);
  const std::string a2 = g.text(false), b2 = g.restyle(a2), c2 = g.text(false);
  ASSERT_EQ(sig(a2).exact, sig(b2).exact);
  ASSERT_FALSE(band_shared(sig(a2), sig(c2)));
  ASSERT_FALSE(band_shared(sig(b2), sig(c2)));
  const std::string b2_url = "https://b.example.org/y", c2_url = "HTTP://B.Example.org:443/y#top";
  ASSERT_EQ(page_key(b2_url, ""), page_key(c2_url, ""));
  Files files(3);  // A, B, C each in its own file and input task (tasks = 3)
  files[0].push_back(record("A", a, "https://n.example.org/a", false, 0));
  files[0].push_back(record("A2", a2, "https://a.example.org/x", false, 0));
  files[1].push_back(record("B", b, "https://n.example.org/b", false, 0));
  files[1].push_back(record("B2", b2, b2_url, false, 0));
  files[2].push_back(record("C", c, "https://n.example.org/c", false, 0));
  files[2].push_back(record("C2", c2, c2_url, false, 0));
  files[2].push_back(record("other", g.text(false), "https://o.example.org/", false, 0));
  write_files(dir_ / "in", files);
  GlobalDedupConfig cfg = config("chain");
  cfg.dedup = d;
  const std::vector<uint64_t> want = {gd_doc_id(1, 0), gd_doc_id(1, 1), gd_doc_id(2, 0), gd_doc_id(2, 1)};
  const Expected e = reference(files, cfg);
  ASSERT_EQ(std::vector<uint64_t>(e.dropped.begin(), e.dropped.end()), want);  // the reference agrees by construction
  GlobalDedupSummary s;
  GD_ASSERT_OK(gd_run(cfg, s));
  EXPECT_EQ(drops_of(cfg), want);
  EXPECT_EQ(s.components, 2u);
  EXPECT_EQ(s.dropped_exact, 1u);  // B2
  EXPECT_EQ(s.dropped_url, 1u);    // C2, linked only through B2's page
  EXPECT_EQ(s.dropped_near, 2u);   // B, and C whose only link is to the dropped B
  EXPECT_EQ(s.dropped_cross_task, 4u);
  expect_records(records_of(cfg.output + "/part-00002.jsonl.zst"), {files[2][2]}, "part-00002.jsonl.zst");
  // prep's index in input order keeps C: B was not inserted, and C shares nothing with A
  DedupIndex idx(d);
  using V = DedupIndex::Verdict;
  EXPECT_EQ(idx.check_and_insert(sig(a)), V::kUnique);
  EXPECT_EQ(idx.check_and_insert(sig(a2)), V::kUnique);
  EXPECT_EQ(idx.check_and_insert(sig(b)), V::kNear);
  EXPECT_EQ(idx.check_and_insert(sig(b2)), V::kExact);
  EXPECT_EQ(idx.check_and_insert(sig(c)), V::kUnique);
}

// ---- 4. refusals

// Each damage in a fresh work folder: the stage that reads the file refuses it by name, and runs
// once the file is back.
TEST_F(GlobalDedupTest, StagesRefuseMissingTruncatedOrCorruptedFilesByName) {
  corpus();
  enum class Damage { kFlip, kTruncate, kDelete };
  struct Case {
    const char* name;
    int upto;  // stages run before the damage: 1 signatures, 2 + buckets, 3 + cluster and merge
    const char* folder;
    Damage damage;
  };
  const Case cases[] = {{"sig-flip", 1, "signatures", Damage::kFlip},   {"sig-cut", 1, "signatures", Damage::kTruncate},
                        {"sig-gone", 1, "signatures", Damage::kDelete}, {"pairs-flip", 2, "pairs", Damage::kFlip},
                        {"pairs-cut", 2, "pairs", Damage::kTruncate},   {"pairs-gone", 2, "pairs", Damage::kDelete},
                        {"drops-flip", 3, "drops", Damage::kFlip},      {"drops-cut", 3, "drops", Damage::kTruncate}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    GlobalDedupConfig c = config(k.name);
    c.tasks = 2;
    c.buckets = 3;
    GlobalDedupSummary s;
    GD_ASSERT_OK(gd_signatures(c, -1, s));
    if (k.upto >= 2) GD_ASSERT_OK(gd_buckets(c, -1, s));
    if (k.upto >= 3) {
      GD_ASSERT_OK(gd_cluster(c, -1, s));
      GD_ASSERT_OK(gd_cluster_merge(c, s));
    }
    const fs::path victim = largest_data_file(fs::path(c.work) / k.folder);
    const std::string rel = fs::relative(victim, c.work).string(), good = test::read_file(victim.string());
    if (k.damage == Damage::kFlip) flip_middle_byte(victim);
    if (k.damage == Damage::kTruncate) fs::resize_file(victim, good.size() / 2 + 3);
    if (k.damage == Damage::kDelete) fs::remove(victim);
    auto next_stage = [&](GlobalDedupSummary& x) {
      return k.upto == 1 ? gd_buckets(c, -1, x) : k.upto == 2 ? gd_cluster(c, -1, x) : gd_filter(c, -1, x);
    };
    GlobalDedupSummary x;
    Status st = next_stage(x);
    ASSERT_FALSE(st.is_ok()) << rel;
    EXPECT_NE(st.message().find(rel), std::string::npos) << st.message();
    if (k.upto == 3) {
      std::vector<uint64_t> ids;
      st = gd_read_drops(c, ids);
      ASSERT_FALSE(st.is_ok());
      EXPECT_NE(st.message().find(rel), std::string::npos) << st.message();
    }
    test::write_file(victim.string(), good);
    GlobalDedupSummary y;
    GD_ASSERT_OK(next_stage(y));
  }
}

// A stage before the previous one is complete is refused, naming what is missing; completed, the
// stages one by one give gd_run's output.
TEST_F(GlobalDedupTest, StagesRefuseAnIncompletePreviousStage) {
  corpus();
  GlobalDedupConfig c = config("stages");
  GlobalDedupSummary s;
  GD_ASSERT_OK(gd_signatures(c, 0, s));
  GD_ASSERT_OK(gd_signatures(c, 2, s));
  for (int bucket : {-1, 0}) {
    Status st = gd_buckets(c, bucket, s);
    ASSERT_FALSE(st.is_ok());
    const std::string& m = st.message();
    EXPECT_TRUE(m.find("task 1") != std::string::npos || m.find("task-00001") != std::string::npos) << m;
  }
  EXPECT_FALSE(gd_cluster(c, -1, s).is_ok());
  EXPECT_FALSE(gd_cluster_merge(c, s).is_ok());
  EXPECT_FALSE(gd_filter(c, -1, s).is_ok());
  GD_ASSERT_OK(gd_signatures(c, 1, s));
  GD_ASSERT_OK(gd_buckets(c, -1, s));
  EXPECT_FALSE(gd_filter(c, 0, s).is_ok());
  for (int p = 0; p < c.tasks; ++p) GD_ASSERT_OK(gd_cluster(c, p, s));
  GD_ASSERT_OK(gd_cluster_merge(c, s));
  EXPECT_TRUE(tree_of(c.output).empty());
  for (int t = c.tasks - 1; t >= 0; --t) GD_ASSERT_OK(gd_filter(c, t, s));
  GlobalDedupConfig one = config("one");
  GD_ASSERT_OK(gd_run(one, s));
  EXPECT_EQ(tree_of(c.output), tree_of(one.output));
}

TEST_F(GlobalDedupTest, OtherSettingsOrInputsNeedOverwrite) {
  corpus();
  GlobalDedupConfig c = config("a");
  GlobalDedupSummary s;
  GD_ASSERT_OK(gd_run(c, s));
  const auto out = tree_of(c.output);
  GlobalDedupConfig other = c;
  other.dedup.near = false;
  Status st = gd_run(other, s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(c.work), std::string::npos) << st.message();
  EXPECT_FALSE(gd_signatures(other, 0, s).is_ok());
  EXPECT_EQ(tree_of(c.output), out);
  GlobalDedupConfig more = c;
  const json extra = record("e", Gen(3).text(false), "https://e.example/", false, 0);
  test::write_file((dir_ / "extra.jsonl").string(), extra.dump() + "\n");
  more.inputs.push_back((dir_ / "extra.jsonl").string());
  st = gd_run(more, s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(c.work), std::string::npos) << st.message();
  // with overwrite: the new settings' output, as from a fresh folder
  other.overwrite = true;
  GD_ASSERT_OK(gd_run(other, s));
  GlobalDedupConfig fresh = config("fresh");
  fresh.dedup.near = false;
  GD_ASSERT_OK(gd_run(fresh, s));
  EXPECT_EQ(tree_of(other.output), tree_of(fresh.output));
  EXPECT_NE(tree_of(other.output), out);
}

// ---- 5. restart

TEST_F(GlobalDedupTest, RerunRedoesOnlyWhatIsMissing) {
  corpus();
  GlobalDedupConfig c = config("r");
  c.tasks = 2;
  c.buckets = 3;
  GlobalDedupSummary s;
  GD_ASSERT_OK(gd_run(c, s));
  const auto out = tree_of(c.output);
  const std::vector<uint64_t> drops = drops_of(c);
  ASSERT_FALSE(drops.empty());
  GlobalDedupSummary again;
  GD_ASSERT_OK(gd_run(c, again));
  EXPECT_GT(again.units_skipped, 0u);
  EXPECT_EQ(tree_of(c.output), out);
  // one bucket's pairs and one task's drop list gone, as after a kill mid-write
  const fs::path pairs = largest_data_file(fs::path(c.work) / "pairs");
  const fs::path dropped = largest_data_file(fs::path(c.work) / "drops");
  fs::remove(pairs);
  fs::remove(dropped);
  GlobalDedupSummary redo;
  GD_ASSERT_OK(gd_run(c, redo));
  EXPECT_GT(redo.units_skipped, 0u);
  EXPECT_TRUE(fs::exists(pairs)) << pairs << ": its unit was not redone";
  EXPECT_TRUE(fs::exists(dropped)) << dropped << ": its unit was not redone";
  EXPECT_EQ(tree_of(c.output), out);
  EXPECT_EQ(drops_of(c), drops);
  // a run stopped after one task's signatures, finished by gd_run
  GlobalDedupConfig part = config("part");
  part.tasks = 2;
  part.buckets = 3;
  GD_ASSERT_OK(gd_signatures(part, 1, s));
  GlobalDedupSummary rest;
  GD_ASSERT_OK(gd_run(part, rest));
  EXPECT_GE(rest.units_skipped, 1u);
  EXPECT_EQ(tree_of(part.output), out);
}

// ---- 6. the CLI

int run_cli(const std::string& args, const fs::path& log) {
  return shell(kSmelt + " dedup " + args + " >'" + log.string() + "' 2>&1");
}

// The Slurm recipe of docs/dedup.md as a shell loop, one process per unit: the same output as
// `smelt dedup run`; --no-url as the library's url = false. -o goes to the stages that write it.
TEST_F(GlobalDedupTest, CliSlurmLoopIsTheOneProcessRun) {
  corpus();
  auto common = [&](const std::string& name) {
    return "-i '" + (dir_ / "in").string() + "' --work '" + (dir_ / ("w-" + name)).string() + "' --tasks 3 --buckets 4";
  };
  auto out = [&](const std::string& name) { return " -o '" + (dir_ / ("o-" + name)).string() + "'"; };
  const std::string loop = common("loop") + " --threads 1";
  const std::string script = "set -e\nS='" + kSmelt + "'\n" +
                             "for T in 0 1 2; do \"$S\" dedup signatures " + loop + " --task $T; done\n" +
                             "for B in 0 1 2 3; do \"$S\" dedup buckets " + loop + " --task $B; done\n" +
                             "for P in 0 1 2; do \"$S\" dedup cluster " + loop + " --task $P; done\n" +
                             "\"$S\" dedup cluster " + loop + " --merge\n" +
                             "for T in 0 1 2; do \"$S\" dedup filter " + loop + out("loop") + " --task $T; done\n";
  test::write_file((dir_ / "recipe.sh").string(), script);
  ASSERT_EQ(shell("bash '" + (dir_ / "recipe.sh").string() + "' >'" + (dir_ / "loop.log").string() + "' 2>&1"), 0)
      << test::read_file((dir_ / "loop.log").string());
  ASSERT_EQ(run_cli("run " + common("run") + out("run") + " --threads 3", dir_ / "run.log"), 0)
      << test::read_file((dir_ / "run.log").string());
  const auto run = tree_of(dir_ / "o-run");
  ASSERT_GE(run.size(), 6u);
  EXPECT_EQ(tree_of(dir_ / "o-loop"), run);

  ASSERT_EQ(run_cli("run " + common("cli-no-url") + out("cli-no-url") + " --no-url", dir_ / "nourl.log"), 0)
      << test::read_file((dir_ / "nourl.log").string());
  GlobalDedupConfig lib;
  lib.inputs = {(dir_ / "in").string()};
  lib.work = (dir_ / "w-lib").string();
  lib.output = (dir_ / "o-lib").string();
  lib.url = false;
  GlobalDedupSummary s;
  GD_ASSERT_OK(gd_run(lib, s));
  EXPECT_EQ(tree_of(dir_ / "o-cli-no-url"), tree_of(lib.output));
  EXPECT_NE(tree_of(lib.output), run);
}

TEST_F(GlobalDedupTest, CliExitCodes) {
  corpus();
  const std::string in = "-i '" + (dir_ / "in").string() + "'", out = " -o '" + (dir_ / "o").string() + "'",
                    work = " --work '" + (dir_ / "w").string() + "'";
  const fs::path log = dir_ / "log";
  EXPECT_EQ(run_cli("run " + in + out, log), 2) << "no --work";
  EXPECT_EQ(run_cli("run " + in + work + out + " --bogus", log), 2);
  EXPECT_EQ(run_cli("frobnicate " + in + work + out, log), 2);
  EXPECT_EQ(run_cli("buckets " + in + work + " --tasks 2 --task 0", log), 1);
  const std::string m = test::read_file(log.string());
  EXPECT_TRUE(m.find("task 0") != std::string::npos || m.find("task-00000") != std::string::npos) << m;
  EXPECT_EQ(run_cli("run " + in + work + out + " --tasks 2", log), 0) << test::read_file(log.string());
  EXPECT_FALSE(tree_of(dir_ / "o").empty());
  // a task keeps every bucket's file open: a soft limit below that is raised, a hard one is named
  auto sig = [&](const std::string& w) {
    return "'" + kSmelt + "' dedup signatures " + in + " --work '" + (dir_ / w).string() + "' --buckets 300 >'" +
           log.string() + "' 2>&1";
  };
  EXPECT_EQ(shell("bash -c \"ulimit -Sn 128; " + sig("w-soft") + "\""), 0) << test::read_file(log.string());
  EXPECT_EQ(shell("bash -c \"ulimit -n 128; " + sig("w-hard") + "\""), 1) << test::read_file(log.string());
  EXPECT_NE(test::read_file(log.string()).find("open-file limit is 128"), std::string::npos)
      << test::read_file(log.string());
}

}  // namespace

// A process killed (SIGKILL) in the middle of each stage's outputs, then the same command again:
// the result is the clean run's, and nothing half-written is left.
TEST_F(GlobalDedupTest, CliKillInEveryStageThenRerunIsTheCleanRun) {
  corpus();
  auto args = [&](const std::string& name) {
    return "run -i '" + (dir_ / "in").string() + "' --work '" + (dir_ / ("w-" + name)).string() + "' -o '" +
           (dir_ / ("o-" + name)).string() + "' --tasks 3 --buckets 4 --threads 1 --memory-mb 0.004";
  };
  ASSERT_EQ(run_cli(args("clean"), dir_ / "clean.log"), 0) << test::read_file((dir_ / "clean.log").string());
  const auto clean = tree_of(dir_ / "o-clean");
  ASSERT_GE(clean.size(), 6u);
  for (const char* point : {"signatures", "buckets", "cluster", "merge", "filter"}) {
    SCOPED_TRACE(point);
    const std::string name = std::string("kill-") + point;
    const std::string cmd = "SMELT_DEDUP_INJECT_KILL=" + std::string(point) + " '" + kSmelt + "' dedup " +
                            args(name) + " >'" + (dir_ / "k.log").string() + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    // the shell reports a child killed by signal 9 as 128 + 9
    ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 137) << rc << "\n" << test::read_file((dir_ / "k.log").string());
    ASSERT_EQ(run_cli(args(name), dir_ / "r.log"), 0) << test::read_file((dir_ / "r.log").string());
    EXPECT_EQ(tree_of(dir_ / ("o-" + name)), clean);
    for (const fs::path& d : {dir_ / ("w-" + name), dir_ / ("o-" + name)})
      for (const auto& e : fs::recursive_directory_iterator(d)) {
        const std::string f = e.path().filename().string();
        EXPECT_EQ(f.find(".tmp-"), std::string::npos) << e.path();
        EXPECT_EQ(f.find(".spill-"), std::string::npos) << e.path();
      }
  }
}

// Two processes share one run (as mpirun -np 2 or srun would start them, here with --rank/--ranks):
// each takes every other unit of each stage and waits for the other's; the output is the one-process run's.
TEST_F(GlobalDedupTest, CliTwoRanksShareOneRun) {
  corpus();
  auto args = [&](const std::string& name) {
    return "run -i '" + (dir_ / "in").string() + "' --work '" + (dir_ / ("w-" + name)).string() + "' -o '" +
           (dir_ / ("o-" + name)).string() + "' --tasks 3 --buckets 5 --threads 1";
  };
  ASSERT_EQ(run_cli(args("one"), dir_ / "one.log"), 0) << test::read_file((dir_ / "one.log").string());
  const std::string both = "S='" + kSmelt + "'; \"$S\" dedup " + args("two") + " --rank 0 --ranks 2 >'" +
                           (dir_ / "r0.log").string() + "' 2>&1 & \"$S\" dedup " + args("two") +
                           " --rank 1 --ranks 2 >'" + (dir_ / "r1.log").string() + "' 2>&1; b=$?; wait $! ; a=$?; " +
                           "exit $((a + b))";
  ASSERT_EQ(shell("timeout 120 bash -c " + std::string("\"") + "$(cat <<'EOS'\n" + both + "\nEOS\n)" + "\""), 0)
      << test::read_file((dir_ / "r0.log").string()) << test::read_file((dir_ / "r1.log").string());
  EXPECT_EQ(tree_of(dir_ / "o-two"), tree_of(dir_ / "o-one"));
  // each rank did its own share of the signatures: units 0 and 2 on rank 0, unit 1 on rank 1
  const std::string r1 = test::read_file((dir_ / "r1.log").string());
  EXPECT_NE(r1.find("kept"), std::string::npos) << r1;
  EXPECT_TRUE(fs::exists(dir_ / "w-two" / "stats-rank-00000.json"));
  EXPECT_TRUE(fs::exists(dir_ / "w-two" / "stats-rank-00001.json"));
  // under a real mpirun, each rank finds its rank and the rank count in mpirun's environment
  ASSERT_EQ(shell("command -v mpirun > /dev/null 2>&1"), 0) << "mpirun is missing: scripts/install-deps";
  const std::string mpi = "timeout 120 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2 '" +
                          kSmelt + "' dedup " + args("mpi") + " >'" + (dir_ / "mpi.log").string() + "' 2>&1";
  ASSERT_EQ(shell(mpi), 0) << test::read_file((dir_ / "mpi.log").string());
  EXPECT_EQ(tree_of(dir_ / "o-mpi"), tree_of(dir_ / "o-one"));
  EXPECT_TRUE(fs::exists(dir_ / "w-mpi" / "stats-rank-00001.json"));
  // a rank that fails stops the other instead of leaving it waiting: rank 1 alone waits for rank 0's
  // units until rank 0's failure appears
  const std::string bad = "'" + kSmelt + "' dedup " + args("bad") + " --rank 1 --ranks 2 >'" +
                          (dir_ / "bad.log").string() + "' 2>&1";
  const std::string fail = (dir_ / "w-bad" / "failed-rank-00000.txt").string();
  EXPECT_EQ(shell("(sleep 2; mkdir -p '" + (dir_ / "w-bad").string() + "'; echo 'rank 0: a test failure' >'" + fail +
                  "') & timeout 60 " + bad),
            1)
      << test::read_file((dir_ / "bad.log").string());
  EXPECT_NE(test::read_file((dir_ / "bad.log").string()).find("another rank failed"), std::string::npos)
      << test::read_file((dir_ / "bad.log").string());
}

// Incremental: a second crawl deduplicated against the first run (--against) keeps exactly what one
// run over both crawls keeps of the second crawl, without redoing the first; the first run's
// documents are never dropped, and an earlier run of other settings, or unfinished, is refused.
TEST_F(GlobalDedupTest, AgainstAnEarlierRunKeepsWhatOneRunOverBothKeepsOfTheNewCrawl) {
  const Files files = corpus();
  const Files first(files.begin(), files.begin() + 4), second(files.begin() + 4, files.end());
  write_files(dir_ / "all" / "a", first);
  write_files(dir_ / "all" / "b", second);
  GlobalDedupConfig one = config("one");
  one.inputs = {(dir_ / "all" / "a").string()};
  GlobalDedupSummary s1;
  GD_ASSERT_OK(gd_run(one, s1));
  GlobalDedupConfig two = config("two");
  two.inputs = {(dir_ / "all" / "b").string()};
  two.against = {one.work};
  two.tasks = 2;  // the task count may differ from the earlier run's; the bucket count may not
  GlobalDedupSummary s2;
  GD_ASSERT_OK(gd_run(two, s2));
  EXPECT_GT(s2.dropped_earlier, 0u);
  EXPECT_GT(s2.dropped, s2.dropped_earlier);  // and duplicates within the new crawl
  GlobalDedupConfig all = config("all");
  all.inputs = {(dir_ / "all").string()};
  GlobalDedupSummary sa;
  GD_ASSERT_OK(gd_run(all, sa));
  size_t compared = 0;
  for (size_t f = 0; f < second.size(); ++f) {
    const fs::path got = fs::path(two.output) / part_name(f), want = fs::path(all.output) / part_name(first.size() + f);
    ASSERT_EQ(fs::exists(got), fs::exists(want)) << got;
    if (fs::exists(got)) EXPECT_EQ(records_of(got.string()), records_of(want.string())) << got;
    compared += fs::exists(got);
  }
  EXPECT_GT(compared, 0u);
  size_t new_dropped_by_one_run = 0;
  for (uint64_t id : drops_of(all)) new_dropped_by_one_run += gd_doc_file(id) >= first.size();
  EXPECT_EQ(new_dropped_by_one_run, s2.dropped);
  for (uint64_t id : drops_of(two)) {
    EXPECT_EQ(gd_doc_generation(id), kGdThisRun);
    EXPECT_LT(gd_doc_file(id), second.size());
  }
  GlobalDedupConfig other = two;
  other.work = (dir_ / "w-other").string();
  other.url = false;
  GlobalDedupSummary so;
  Status st = gd_run(other, so);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(one.work + "/run.json"), std::string::npos) << st.message();
  fs::remove(fs::path(one.work) / "signatures" / "task-00002.json");
  other.url = true;
  st = gd_run(other, so);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("task-00002.json"), std::string::npos) << st.message();
}

// Where every cluster is a document and its copies (each copy matching its original), global dedup
// and prep's streaming index drop the same documents: the copies, whatever file or task they are in.
TEST_F(GlobalDedupTest, AgreesWithTheStreamingIndexWhenEveryCopyMatchesItsOriginal) {
  Gen g(7);
  Files files(5);
  std::vector<std::string> texts;
  for (int n = 0; n < 150; ++n) {
    const std::string t = g.text(false);
    texts.push_back(t);
    files[static_cast<size_t>(n % 2)].push_back(record("o" + std::to_string(n), t, std::nullopt, false, 0));
  }
  for (int n = 0; n < 150; ++n) {  // exact and 1% near copies in the later files (other tasks)
    const std::string& t = texts[g.pick(texts.size())];
    const std::string copy = n % 2 ? g.restyle(t) : g.edit(t, false, 0.01);
    files[2 + static_cast<size_t>(n % 3)].push_back(record("c" + std::to_string(n), copy, std::nullopt, false, 0));
  }
  write_files(dir_ / "in", files);
  GlobalDedupConfig c = config("agree");
  c.url = false;  // the streaming index has no URL key
  GlobalDedupSummary s;
  GD_ASSERT_OK(gd_run(c, s));
  DedupIndex idx(c.dedup);
  std::vector<uint64_t> streaming;
  DedupSignature sig;
  for (size_t f = 0; f < files.size(); ++f)
    for (size_t r = 0; r < files[f].size(); ++r) {
      dedup_signature(text_of(files[f][r]), false, c.dedup, sig);
      if (idx.check_and_insert(sig) != DedupIndex::Verdict::kUnique) streaming.push_back(gd_doc_id(f, r));
    }
  EXPECT_GT(streaming.size(), 100u);
  EXPECT_EQ(drops_of(c), streaming);
}
