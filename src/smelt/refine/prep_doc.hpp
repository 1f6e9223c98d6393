// One document through the refinery: what a prep worker does to it, from the raw record to the
// output line, and the decisions made on the way (language, quality, drop reason). Pure: depends
// only on the document, the config and the loaded models, so any thread count gives the same
// output. Not here: the order, dedup against earlier documents or writing (prep.cpp).
#pragma once
#include <cstdint>
#include <string>

#include "smelt/refine/dedup.hpp"
#include "smelt/refine/prep.hpp"
#include "smelt/stage/restartable_stage.hpp"
#include "smelt/text/terminal_codes.hpp"

namespace smelt {

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
};

// Everything a worker does to one document: fills it from it.doc.
void process_item(const PrepConfig& c, PrepItem& it);

}  // namespace smelt
