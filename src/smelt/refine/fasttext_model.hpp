// A fastText model file (.bin) loaded through Debian's libfasttext: supervised classifiers (DCLM's
// and FineWeb-Edu's style quality classifiers, `smelt quality train`'s output) and language-ID
// models (lid.176.bin, GlotLID's model.bin). Predictions are those of fastText's own tool
// (`fasttext predict-prob`) for the same line: the text's newlines become spaces first, since the
// tool reads one line per document. Not here: what prep does with a prediction (prep.cpp).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "smelt/common/status.hpp"

namespace fasttext {
class FastText;
}

namespace smelt {

class FastTextModel {
 public:
  // Loads path. A missing file, a file that is not a fastText model, a quantized or truncated one
  // the library refuses, or an unsupervised (word-vector) model: an error naming the file and what
  // was expected.
  static Status load(const std::string& path, std::unique_ptr<FastTextModel>& out);
  ~FastTextModel();

  const std::string& path() const { return path_; }
  // The model's labels without fastText's "__label__" prefix, in the model's order.
  const std::vector<std::string>& labels() const { return labels_; }
  // The index of label (with or without "__label__"), or -1.
  int label_index(std::string_view label) const;

  // The k most probable labels (all of them when k <= 0) of text, highest first, as (label index,
  // probability) with the probability fastText's tool prints. Thread-safe: no shared scratch.
  void predict(std::string_view text, int k, std::vector<std::pair<int, float>>& out) const;
  // The probability of one label (index into labels()) for text; 0 when the label is not among
  // the predictions.
  float probability(std::string_view text, int label) const;

  // The line fastText reads for text: every '\n' and '\r' a space (how the tool sees a document
  // written on one line; also how `smelt quality train` writes its training lines).
  static std::string one_line(std::string_view text);

 private:
  FastTextModel() = default;
  std::string path_;
  std::unique_ptr<fasttext::FastText> ft_;
  std::vector<std::string> labels_;
};

}  // namespace smelt
