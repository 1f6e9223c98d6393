// Cloze items from text (cloze.hpp).
#include "smelt/eval/cloze.hpp"

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/common/cjk.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/utf8.hpp"

namespace smelt {

namespace {

uint64_t next(uint64_t& x) {  // splitmix64
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Line {
  std::string head, tail;  // tail: the ending, with its leading space where the line has spaces
  bool han = false;
};

// Han/kana lines (no spaces between words) are cut at the middle character; others at the space
// nearest the middle byte (none: not used).
bool cut(const std::string& s, Line& out) {
  size_t chars = 0, wide = 0;
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = utf8_next(s, i);
    chars++;
    wide += is_han(cp) || is_kana(cp);
  }
  out.han = wide * 3 > chars;
  size_t at = std::string::npos;
  if (out.han) {
    size_t i = 0;
    for (size_t k = 0; k < chars / 2; k++) utf8_next(s, i);
    at = i;
  } else {
    for (size_t d = 0; d < s.size() / 2 && at == std::string::npos; d++)
      for (size_t p : {s.size() / 2 - d, s.size() / 2 + d})
        if (p > 0 && p < s.size() && s[p] == ' ') {
          at = p;
          break;
        }
  }
  if (at == std::string::npos || at == 0 || at >= s.size()) return false;
  out.head = s.substr(0, at);
  out.tail = s.substr(at);
  return out.head.find_first_not_of(' ') != std::string::npos && out.tail.find_first_not_of(' ') != std::string::npos;
}

std::vector<Line> candidates(const std::vector<std::string>& docs, const ClozeOptions& o) {
  std::vector<Line> out;
  std::set<std::string> seen;
  for (const auto& d : docs) {
    size_t b = 0;
    while (b < d.size()) {
      size_t e = d.find('\n', b);
      if (e == std::string::npos) e = d.size();
      std::string s = d.substr(b, e - b);
      b = e + 1;
      const size_t x = s.find_first_not_of(" \t\r"), y = s.find_last_not_of(" \t\r");
      if (x == std::string::npos) continue;
      s = s.substr(x, y - x + 1);
      Line l;
      if ((int)s.size() < o.min_bytes || (int)s.size() > o.max_bytes || !utf8_valid(s) || !seen.insert(s).second ||
          !cut(s, l))
        continue;
      out.push_back(std::move(l));
    }
  }
  return out;
}

}  // namespace

Status cloze_make(const std::vector<std::string>& docs, const ClozeOptions& o, std::vector<TaskItem>& items) {
  if (o.choices < 2) return Status::error("[eval] cloze: choices must be >= 2");
  std::vector<Line> lines = candidates(docs, o);
  uint64_t state = o.seed;
  for (size_t i = lines.size(); i > 1; i--) std::swap(lines[i - 1], lines[next(state) % i]);
  std::vector<size_t> by[2];  // [han] line indices
  for (size_t i = 0; i < lines.size(); i++) by[lines[i].han].push_back(i);
  items.clear();
  for (size_t i = 0; i < lines.size() && (int64_t)items.size() < o.max_items; i++) {
    const std::vector<size_t>& pool = by[lines[i].han];
    if ((int)pool.size() < o.choices) continue;
    TaskItem it;
    it.context = lines[i].head;
    std::set<std::string> used = {lines[i].tail};
    std::vector<std::string> wrong;
    for (int tries = 0; (int)wrong.size() < o.choices - 1 && tries < 64 * o.choices; tries++) {
      const Line& other = lines[pool[next(state) % pool.size()]];
      if (used.insert(other.tail).second) wrong.push_back(other.tail);
    }
    if ((int)wrong.size() < o.choices - 1) continue;
    it.gold = (int)(next(state) % (uint64_t)o.choices);
    for (int j = 0, w = 0; j < o.choices; j++) it.choices.push_back(j == it.gold ? lines[i].tail : wrong[w++]);
    it.line = (int64_t)items.size() + 1;
    items.push_back(std::move(it));
  }
  if (items.empty())
    return Status::error(fmt::format("[eval] cloze: no item could be made: {} usable line(s) of {}..{} bytes, fewer than "
                                     "{} of one script", lines.size(), o.min_bytes, o.max_bytes, o.choices));
  return Status::ok();
}

Status cloze_write(const std::string& stem, const std::string& name, const std::vector<TaskItem>& items) {
  std::string jsonl;
  for (const auto& it : items)
    jsonl += nlohmann::json{{"context", it.context}, {"choices", it.choices}, {"gold", it.gold}}.dump() + "\n";
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(stem).parent_path(), ec);
  if (Status s = files_write_atomic(stem + ".jsonl", jsonl); !s) return s;
  const std::string toml = fmt::format(
      "# Made by `smelt eval --make-cloze` from held-out text (docs/eval.md): each line cut near its middle,\n"
      "# the right ending against the endings of other lines of the same script.\n"
      "[task]\nname = \"{}\"\nkind = \"multiple_choice\"\nmetric = \"acc_norm\"\ntarget_delimiter = \"\"\n", name);
  return files_write_atomic(stem + ".toml", toml);
}

}  // namespace smelt
