// A labelled crawl's answers and prep's drop decision tallied against them (prep_labels.hpp).
#include "smelt/refine/prep_labels.hpp"

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

#include "smelt/common/hash.hpp"
#include "smelt/common/page_key.hpp"

namespace smelt {

namespace {

// One line of the labels file into (url, id, kind, keep); "" when it is good, else what is wrong.
std::string parse_label(const std::string& line, std::string& url, std::string& id, std::string& kind, bool& keep) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "expected a JSON object";
  auto text = [&](const char* key, std::string& out) -> std::string {
    if (!j.contains(key)) return "";
    if (!j[key].is_string()) return fmt::format("\"{}\" must be a string", key);
    out = j[key].get<std::string>();
    return "";
  };
  for (auto [key, out] : {std::pair<const char*, std::string*>{"url", &url}, {"id", &id}, {"kind", &kind}})
    if (std::string e = text(key, *out); !e.empty()) return e;
  if (url.empty() && id.empty()) return "expected \"url\" or \"id\"";
  if (kind.empty()) return "expected \"kind\", a non-empty string";
  keep = kind == "good";
  if (j.contains("keep")) {
    if (!j["keep"].is_boolean()) return "\"keep\" must be true or false";
    keep = j["keep"].get<bool>();
  }
  return "";
}

double ratio(uint64_t a, uint64_t b) { return b ? static_cast<double>(a) / b : 0.0; }

}  // namespace

Status PrepLabels::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::error(fmt::format("{}: cannot open the labels file", path));
  std::map<std::string, int> index;
  std::string line;
  for (uint64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string url, id, kind;
    bool keep = false;
    if (std::string e = parse_label(line, url, id, kind, keep); !e.empty())
      return Status::error(fmt::format("{} line {}: {}", path, n, e));
    auto [it, fresh] = index.emplace(kind, static_cast<int>(kinds_.size()));
    if (fresh) kinds_.push_back(kind), keep_.push_back(keep);
    if (keep_[it->second] != keep)
      return Status::error(fmt::format("{} line {}: kind \"{}\" is keep = {} here but {} on an earlier line", path, n,
                                       kind, keep, !keep));
    if (!url.empty()) by_page_[page_key(url, "")] = it->second;
    if (!id.empty()) by_id_[id] = it->second;
    lines_++;
    digest_ = hash64(line, digest_ ^ n);
  }
  if (in.bad()) return Status::error(fmt::format("{}: read error", path));
  if (kinds_.empty()) return Status::error(fmt::format("{}: no labels (expected JSON lines with url, kind)", path));
  return Status::ok();
}

int PrepLabels::find(std::string_view url, std::string_view id) const {
  if (!url.empty())
    if (auto it = by_page_.find(page_key(url, "")); it != by_page_.end()) return it->second;
  if (!id.empty())
    if (auto it = by_id_.find(std::string(id)); it != by_id_.end()) return it->second;
  return -1;
}

void LabelTally::add(const PrepLabels& labels, int kind, const std::string& drop) {
  if (kind < 0) {
    unlabelled++;
    return;
  }
  Kind& k = kinds[labels.kinds()[kind]];
  k.keep = labels.wanted(kind);
  k.documents++;
  if (!drop.empty()) k.dropped++, k.reasons[drop]++;
}

nlohmann::json LabelTally::to_json() const {
  uint64_t wanted_docs = 0, wanted_dropped = 0, noise_docs = 0, noise_dropped = 0;
  for (const auto& [name, k] : kinds) {
    (k.keep ? wanted_docs : noise_docs) += k.documents;
    (k.keep ? wanted_dropped : noise_dropped) += k.dropped;
  }
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, k] : kinds) {
    nlohmann::json j = {{"keep", k.keep}, {"documents", k.documents}, {"dropped", k.dropped},
                        {"drop_rate", ratio(k.dropped, k.documents)}, {"reasons", k.reasons}};
    if (!k.keep) j["precision"] = ratio(k.dropped, k.dropped + wanted_dropped);
    out[name] = j;
  }
  return {{"kinds", out},
          {"drop_decision",
           {{"precision", ratio(noise_dropped, noise_dropped + wanted_dropped)},
            {"recall", ratio(noise_dropped, noise_docs)},
            {"wanted_kept", ratio(wanted_docs - wanted_dropped, wanted_docs)}}},
          {"unlabelled", unlabelled}};
}

void LabelTally::from_json(const nlohmann::json& j) {
  kinds.clear();
  for (const auto& [name, k] : j.at("kinds").items()) {
    Kind& t = kinds[name];
    t.keep = k.at("keep"), t.documents = k.at("documents"), t.dropped = k.at("dropped");
    t.reasons = k.at("reasons").get<std::map<std::string, uint64_t>>();
  }
  unlabelled = j.at("unlabelled");
}

std::string LabelTally::summary_text(const std::string& file) const {
  const nlohmann::json j = to_json();
  std::string s = fmt::format("  labelled pages ({}): the drop decision per kind\n", file);
  s += fmt::format("    {:<14} {:>9} {:>9} {:>11} {:>10}  {}\n", "kind", "documents", "dropped", "recall", "precision",
                   "drop reasons");
  for (const auto& [name, k] : kinds) {
    std::vector<std::pair<uint64_t, std::string>> top;
    for (const auto& [r, n] : k.reasons) top.emplace_back(n, r);
    std::sort(top.rbegin(), top.rend());
    std::string reasons;
    for (size_t i = 0; i < top.size() && i < 3; ++i) reasons += fmt::format("{}{}={}", i ? " " : "", top[i].second, top[i].first);
    const nlohmann::json& kj = j["kinds"][name];
    s += k.keep ? fmt::format("    {:<14} {:>9} {:>9} {:>11} {:>10}  {}\n", name + " (wanted)", k.documents, k.dropped,
                              fmt::format("kept {:.1f}%", 100 * (1 - kj["drop_rate"].get<double>())), "", reasons)
                : fmt::format("    {:<14} {:>9} {:>9} {:>10.1f}% {:>9.1f}%  {}\n", name, k.documents, k.dropped,
                              100 * kj["drop_rate"].get<double>(), 100 * kj["precision"].get<double>(), reasons);
  }
  const nlohmann::json& d = j["drop_decision"];
  s += fmt::format("    all noise: precision {:.1f}%, recall {:.1f}%; wanted pages kept {:.1f}%{}\n",
                   100 * d["precision"].get<double>(), 100 * d["recall"].get<double>(),
                   100 * d["wanted_kept"].get<double>(),
                   unlabelled ? fmt::format("; {} document(s) carried no label", unlabelled) : "");
  return s;
}

}  // namespace smelt
