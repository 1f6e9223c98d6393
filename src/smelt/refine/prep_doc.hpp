// One document through the refinery: what a prep worker does to it, from the raw record to the
// output line, and the decisions made on the way (URL, language, quality, contamination,
// classifiers, reference perplexity, drop reason), with the time each stage took. Pure: depends
// only on the document, the config and the loaded models, so any thread count gives the same
// output. Not here: the order, dedup against earlier documents or writing (prep.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "smelt/refine/dedup.hpp"
#include "smelt/refine/pii.hpp"
#include "smelt/refine/prep.hpp"
#include "smelt/refine/refinery.hpp"
#include "smelt/stage/restartable_stage.hpp"
#include "smelt/text/terminal_codes.hpp"

namespace smelt {

// The stages a worker times (their share of prep's time is in the summary and stats.json).
enum PrepStage : int {
  kStageExtract, kStageUrl, kStageLanguage, kStageQuality, kStageDecontaminate, kStageClassifiers,
  kStagePerplexity, kStagePii, kStageDedup, kPrepStages
};
const char* prep_stage_name(int stage);

// One document (or the end-of-file marker) on its way through the pipeline.
struct PrepItem : StageItem {
  RawDoc doc;
  // filled by a worker
  uint64_t raw_bytes = 0, text_bytes = 0;
  std::string lang;
  double score = -1;
  TerminalStrip stripped;        // terminal control codes taken out of the text
  std::string drop;              // "" = keep (pending dedup), else the drop reason
  std::string rules;             // failed quality rules (only kept for rejected examples)
  std::string line;              // the output JSON line without its closing '}'
  DedupSignature sig;
  std::string url_block;         // "LIST/CATEGORY" of a blocked URL
  int contaminated = -1;         // the decontamination file the text shares an n-gram with
  bool scored = false;           // reached the classifiers (the score pass counts it)
  std::vector<double> class_probs;  // per [[prep.classifiers]] entry, when scored
  double ref_bpb = -1;           // bits per byte under the reference model, when scored
  PiiCounts pii;                 // what was masked
  std::array<uint64_t, kPrepStages> stage_ns{};
};

// Everything a worker does to one document: fills it from it.doc.
void process_item(const PrepConfig& c, const Refinery& r, PrepItem& it);

}  // namespace smelt
