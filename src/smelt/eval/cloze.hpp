// A multiple-choice task made from text (docs/eval.md, "A task from held-out text"): lines of the
// documents cut near their middle; the context is the first part, the right choice its own ending
// and the others the endings of other lines in the same script (Han/kana or not), drawn by a
// seeded generator. A model that has learnt the language picks the ending that continues the
// sentence; an untrained one scores chance (1/choices). Not a benchmark of the field: a signal to
// compare checkpoints of one run on text it never trained on.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/eval/task.hpp"

namespace smelt {

struct ClozeOptions {
  int64_t max_items = 500;
  int choices = 4;
  uint64_t seed = 1234;
  int min_bytes = 40, max_bytes = 400;  // a line's length to be used, in bytes
};

// Items from docs (each a document's text). Lines are trimmed; repeated lines are used once.
// Fails when fewer than `choices` lines of one script qualify.
Status cloze_make(const std::vector<std::string>& docs, const ClozeOptions& o, std::vector<TaskItem>& items);
// Writes STEM.jsonl (the items) and STEM.toml ([task] name, kind multiple_choice, metric acc_norm,
// target_delimiter "": the endings carry their own leading space), each atomically.
Status cloze_write(const std::string& stem, const std::string& name, const std::vector<TaskItem>& items);

}  // namespace smelt
