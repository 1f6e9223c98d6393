// Data sources and weights, the resumable loader position (JSON), and the weighted blend schedule.
// Not here: permutations (sampler.cpp), building batches (packing.cpp).
#include "smelt/dataset/blend.hpp"

#include <cerrno>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

namespace smelt {

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
}  // namespace

Status blend_parse_sources(std::string_view spec, std::vector<DataSource>& out) {
  out.clear();
  std::set<std::string> names;
  size_t at = 0;
  while (at <= spec.size()) {
    size_t end = spec.find(',', at);
    if (end == std::string_view::npos) end = spec.size();
    std::string_view e = trim(spec.substr(at, end - at));
    at = end + 1;
    if (e.empty()) {
      if (end == spec.size()) break;
      return Status::error(fmt::format("data sources \"{}\": empty entry; expected PREFIX[:WEIGHT],...", spec));
    }
    DataSource s;
    std::string_view body = e;
    if (size_t eq = body.find('='); eq != std::string_view::npos) {
      s.name = std::string(trim(body.substr(0, eq)));
      body = trim(body.substr(eq + 1));
    }
    if (size_t colon = body.rfind(':'); colon != std::string_view::npos) {
      std::string w(trim(body.substr(colon + 1)));
      char* endp = nullptr;
      errno = 0;
      double v = std::strtod(w.c_str(), &endp);
      if (w.empty() || endp != w.c_str() + w.size() || errno != 0 || !(v > 0) || v > 1e12)
        return Status::error(fmt::format("data source \"{}\": weight \"{}\" is not a number > 0", e, w));
      s.weight = v;
      body = trim(body.substr(0, colon));
    }
    s.prefix = std::string(body);
    if (s.prefix.empty()) return Status::error(fmt::format("data source \"{}\": empty prefix", e));
    if (s.name.empty()) s.name = s.prefix;
    if (!names.insert(s.name).second)
      return Status::error(fmt::format("data source \"{}\": the name \"{}\" appears twice; give one a NAME= prefix",
                                       e, s.name));
    out.push_back(std::move(s));
    if (end == spec.size()) break;
  }
  if (out.empty()) return Status::error("data sources: none given; expected PREFIX[:WEIGHT],...");
  return Status::ok();
}

std::string blend_key(const std::vector<DataSource>& sources) {
  std::string k;
  for (const auto& s : sources) k += fmt::format("{}={};", s.name, s.weight);
  return k;
}

size_t blend_pick(const std::vector<double>& weights, const std::vector<SourceCursor>& cursors) {
  double total = 0, wsum = 0;
  for (size_t i = 0; i < cursors.size(); ++i) total += static_cast<double>(cursors[i].units), wsum += weights[i];
  size_t best = 0;
  double best_err = -1e300;
  for (size_t i = 0; i < cursors.size(); ++i) {
    double err = weights[i] / wsum * total - static_cast<double>(cursors[i].units);
    if (err > best_err + 1e-9 * (1 + total)) best_err = err, best = i;
  }
  return best;
}

nlohmann::json LoaderPosition::to_json() const {
  nlohmann::json j;
  j["version"] = 1;
  j["step"] = step;
  j["blend"] = blend;
  if (span_tokens > 0) j["span_tokens"] = span_tokens;
  nlohmann::json s = nlohmann::json::object();
  for (const auto& [name, c] : sources)
    s[name] = {{"epoch", c.epoch}, {"docs", c.docs}, {"offset", c.offset}, {"units", c.units}};
  j["sources"] = s;
  nlohmann::json p = nlohmann::json::array();
  for (const auto& d : pending)
    p.push_back({{"bucket", d.bucket}, {"source", d.source}, {"doc", d.doc}, {"tokens", d.tokens}, {"eod", d.eod}});
  j["pending"] = p;
  return j;
}

Status LoaderPosition::from_json(const nlohmann::json& j, LoaderPosition& out) {
  try {
    if (!j.is_object() || j.value("version", 0) != 1)
      return Status::error("loader position: expected a JSON object with \"version\": 1");
    LoaderPosition p;
    p.step = j.at("step").get<uint64_t>();
    p.blend = j.value("blend", "");
    p.span_tokens = j.value("span_tokens", uint64_t{0});
    for (const auto& [name, c] : j.at("sources").items())
      p.sources[name] = SourceCursor{c.at("epoch").get<uint64_t>(), c.at("docs").get<uint64_t>(),
                                     c.at("offset").get<uint64_t>(), c.value("units", uint64_t{0})};
    if (j.contains("pending"))
      for (const auto& d : j.at("pending"))
        p.pending.push_back({d.at("bucket").get<int>(), d.at("source").get<std::string>(), d.at("doc").get<uint64_t>(),
                             d.at("tokens").get<uint32_t>(), d.value("eod", false)});
    out = std::move(p);
    return Status::ok();
  } catch (const std::exception& e) {
    return Status::error(fmt::format("loader position: {}", e.what()));
  }
}

bool LoaderPosition::operator==(const LoaderPosition& o) const { return to_json() == o.to_json(); }

}  // namespace smelt
