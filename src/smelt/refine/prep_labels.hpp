// A labelled crawl's answers (`[prep] labels` / `smelt prep --labels FILE`): what kind of page each
// document is and whether a user wants it, and the tally of prep's drop decision against them per
// kind, its precision and recall: the refinery's own confusion table. Not the decision itself
// (prep_doc.cpp, prep.cpp); the labels never change what prep keeps.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/common/status.hpp"

namespace smelt {

// The labels file: JSON lines `{"url": "...", "kind": "mirror", "keep": false}` ("id" in place of
// or beside "url"; "keep" defaults to true for kind "good" and false otherwise). A document
// matches by its page (common/page_key.hpp: host and path, whatever the scheme or port), then by id.
class PrepLabels {
 public:
  // Reads PATH; an unreadable file or a bad line fails, naming the file and the line.
  Status load(const std::string& path);
  bool empty() const { return kinds_.empty(); }
  // The kind's index for a document, or -1 when it carries no label.
  int find(std::string_view url, std::string_view id) const;
  const std::vector<std::string>& kinds() const { return kinds_; }
  bool wanted(int kind) const { return keep_[kind]; }
  // label lines read (a line with both a url and an id counts once)
  size_t labelled() const { return lines_; }
  // a digest of the file's entries (the run's fingerprint covers it)
  uint64_t digest() const { return digest_; }

 private:
  std::vector<std::string> kinds_;
  std::vector<bool> keep_;  // [kind]
  std::unordered_map<std::string, int> by_page_, by_id_;
  size_t lines_ = 0;
  uint64_t digest_ = 0;
};

// The drop decision per kind, summed over the documents prep read (restored on resume).
struct LabelTally {
  struct Kind {
    bool keep = false;
    uint64_t documents = 0, dropped = 0;
    std::map<std::string, uint64_t> reasons;  // drop reason -> documents
  };
  std::map<std::string, Kind> kinds;
  uint64_t unlabelled = 0;

  void add(const PrepLabels& labels, int kind, const std::string& drop);
  bool empty() const { return kinds.empty() && unlabelled == 0; }
  // {"kinds": {kind: {keep, documents, dropped, drop_rate, precision, reasons}}, "drop_decision":
  // {precision, recall, wanted_kept}, "unlabelled"}: precision of a noise kind is its drops over
  // its drops plus the wanted pages' drops; recall its drop rate.
  nlohmann::json to_json() const;
  void from_json(const nlohmann::json& j);
  // The table for the summary, one line per kind.
  std::string summary_text(const std::string& file) const;
};

}  // namespace smelt
