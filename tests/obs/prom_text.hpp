// Test helper: a strict reader of the Prometheus text exposition format 0.0.4, written from its
// specification (prometheus.io/docs/instrumenting/exposition_formats): "# HELP name text",
// "# TYPE name counter|gauge|histogram|summary|untyped" at most once each and before the family's
// samples, a family's samples in one group, metric and label names from their alphabets, label
// values with only \\ \" \n escapes, values as Go's ParseFloat reads them (NaN, +Inf, -Inf), an
// optional integer timestamp, no series twice. Not a scraper: what it reads is for assertions.
#pragma once
#include <cctype>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace smelt::test {

struct PromFamily {
  std::string type = "untyped", help;
};

struct PromText {
  std::string error;                        // "" when the text is well formed; else line and why
  std::map<std::string, PromFamily> families;
  std::map<std::string, double> samples;    // "name{k=v,k=v}" (labels sorted) -> value
  bool has(const std::string& series) const { return samples.count(series) > 0; }
  double at(const std::string& series) const {
    auto it = samples.find(series);
    return it == samples.end() ? NAN : it->second;
  }
};

inline bool prom_metric_name(const std::string& s) {
  static const std::regex re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  return std::regex_match(s, re);
}

inline bool prom_value(const std::string& s, double& v) {
  if (s == "NaN") return v = NAN, true;
  if (s == "+Inf" || s == "Inf") return v = INFINITY, true;
  if (s == "-Inf") return v = -INFINITY, true;
  static const std::regex re("[+-]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+)?");
  if (!std::regex_match(s, re)) return false;
  v = std::stod(s);
  return true;
}

// The family a sample name belongs to: itself, or for histograms and summaries the name without
// its _bucket / _sum / _count suffix.
inline std::string prom_family_of(const std::string& name, const std::map<std::string, PromFamily>& fam) {
  for (const char* suf : {"_bucket", "_sum", "_count"}) {
    const std::string s = suf;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const std::string base = name.substr(0, name.size() - s.size());
      auto it = fam.find(base);
      if (it != fam.end() && (it->second.type == "histogram" || it->second.type == "summary")) return base;
    }
  }
  return name;
}

inline PromText prom_parse(const std::string& text) {
  PromText out;
  std::set<std::string> typed, helped, done;  // done: families whose group of samples has ended
  std::string current;                        // the family of the last sample
  std::istringstream in(text);
  std::string line;
  int n = 0;
  auto fail = [&](const std::string& why) {
    if (out.error.empty()) out.error = "line " + std::to_string(n) + ": " + why + ": '" + line + "'";
  };
  if (!text.empty() && text.back() != '\n') {
    out.error = "the text does not end with a newline";
    return out;
  }
  while (std::getline(in, line) && out.error.empty()) {
    n++;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream c(line.substr(1));
      std::string word, name;
      c >> word >> name;
      if (word != "HELP" && word != "TYPE") continue;  // another comment
      if (!prom_metric_name(name)) { fail("bad metric name in " + word); break; }
      std::string rest;
      std::getline(c, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (word == "HELP") {
        if (!helped.insert(name).second) { fail("second HELP for " + name); break; }
        out.families[name].help = rest;
      } else {
        static const std::set<std::string> types = {"counter", "gauge", "histogram", "summary", "untyped"};
        if (!types.count(rest)) { fail("unknown TYPE " + rest); break; }
        if (!typed.insert(name).second) { fail("second TYPE for " + name); break; }
        if (done.count(name) || current == name) { fail("TYPE after the samples of " + name); break; }
        out.families[name].type = rest;
      }
      continue;
    }
    // a sample: name [{labels}] value [timestamp]
    size_t p = 0;
    while (p < line.size() && (std::isalnum((unsigned char)line[p]) || line[p] == '_' || line[p] == ':')) p++;
    const std::string name = line.substr(0, p);
    if (!prom_metric_name(name)) { fail("bad metric name"); break; }
    std::map<std::string, std::string> labels;
    if (p < line.size() && line[p] == '{') {
      p++;
      while (p < line.size() && line[p] != '}') {
        size_t q = p;
        while (q < line.size() && (std::isalnum((unsigned char)line[q]) || line[q] == '_')) q++;
        const std::string key = line.substr(p, q - p);
        if (key.empty() || std::isdigit((unsigned char)key[0])) { fail("bad label name"); break; }
        if (q + 1 >= line.size() || line[q] != '=' || line[q + 1] != '"') { fail("want =\" after a label name"); break; }
        q += 2;
        std::string val;
        bool closed = false;
        for (; q < line.size(); q++) {
          if (line[q] == '\\') {
            if (q + 1 >= line.size()) break;
            const char e = line[++q];
            if (e == '\\') val += '\\';
            else if (e == '"') val += '"';
            else if (e == 'n') val += '\n';
            else { fail("bad escape in a label value"); break; }
          } else if (line[q] == '"') {
            closed = true;
            q++;
            break;
          } else {
            val += line[q];
          }
        }
        if (!out.error.empty()) break;
        if (!closed) { fail("unterminated label value"); break; }
        if (!labels.emplace(key, val).second) { fail("label " + key + " twice"); break; }
        if (q < line.size() && line[q] == ',') q++;
        p = q;
      }
      if (!out.error.empty()) break;
      if (p >= line.size()) { fail("unterminated label set"); break; }
      p++;  // '}'
    }
    if (p >= line.size() || line[p] != ' ') { fail("want a space before the value"); break; }
    std::istringstream rest(line.substr(p));
    std::string value, ts, extra;
    rest >> value >> ts >> extra;
    double v = 0;
    if (!prom_value(value, v)) { fail("bad value"); break; }
    if (!ts.empty() && !std::regex_match(ts, std::regex("-?[0-9]+"))) { fail("bad timestamp"); break; }
    if (!extra.empty()) { fail("text after the timestamp"); break; }
    const std::string fam = prom_family_of(name, out.families);
    if (fam != current) {
      if (done.count(fam)) { fail("the samples of " + fam + " are not in one group"); break; }
      if (!current.empty()) done.insert(current);
      current = fam;
    }
    std::string key = name + "{";
    for (const auto& [k, val] : labels) key += k + "=" + val + ",";
    if (key.back() == ',') key.pop_back();
    key += "}";
    if (!out.samples.emplace(key, v).second) { fail("series twice"); break; }
  }
  return out;
}

}  // namespace smelt::test
