// Model-based quality classifiers (DCLM's recipe): a fastText supervised model trained on positive
// (high-quality) against negative (web) documents, and its precision/recall/F1/accuracy/ROC AUC on
// labelled documents. Not here: loading and predicting (fasttext_model.hpp), the command line
// (cli/quality_cmd.cpp), what prep does with a score (prep).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "smelt/common/status.hpp"

namespace smelt {

// Every fastText setting below defaults to DCLM's classifier (mlfoundations/dclm,
// baselines/train_fasttext_classifier.py: lr 0.1, dim 100, ws 5, epoch 5, minCount 1, seed 42; its
// baselines/README.md trains with --wordNgrams 2, and the released model is
// openhermes_reddit_eli5_vs_rw_v2_bigram_200k_train.bin with labels __label__hq / __label__cc).
// What the script leaves to fastText's `supervised` defaults stays so: softmax loss, 2M buckets,
// no character n-grams. Threads default to 1, where fastText's training is deterministic.
struct ClassifierTrainOptions {
  std::vector<std::string> positive, negative;  // files (JSONL(.gz|.zst): text_field; .txt: a doc a line)
  std::string output;                           // the model (.bin), written atomically
  std::string positive_label = "hq", negative_label = "cc";  // without "__label__"
  int dim = 100;
  int word_ngrams = 2;
  int epoch = 5;
  double lr = 0.1;
  int min_count = 1;
  int bucket = 2000000;
  std::string loss = "softmax";  // softmax, ns, hs, ova (one-vs-all)
  int threads = 1;               // > 1 trains faster but not reproducibly (Hogwild updates)
  int seed = 42;                 // the split, the shuffle and fastText's initialisation
  double valid_fraction = 0.1;   // held out by a hash of the training line, in [0, 1)
  uint64_t max_docs_per_class = 0;  // the first N documents of each class in input order; 0 = all
  std::string text_field = "text";
};

// Checks ranges and names (loss, labels) before any work; the message names the option.
Status classifier_check_options(const ClassifierTrainOptions& opt);

// The fastText training line of one document: "__label__<label> " + the text on one line
// (FastTextModel::one_line, as prediction sees it), without tokens that begin with "__label__"
// (fastText would read them as extra labels when training; prediction ignores them anyway).
// Empty when the text has no words.
std::string classifier_training_line(std::string_view label, std::string_view text);

// Binary-classification metrics of the positive label's probability at `threshold` (a document is
// predicted positive when p >= threshold). ROC AUC: the Mann-Whitney rank statistic with tied
// scores given their average rank (Hanley & McNeil 1982), NaN when a class is empty. A ratio
// whose denominator is 0 (precision with nothing predicted positive, ...) is 0, as scikit-learn's.
struct ClassifierEval {
  uint64_t positives = 0, negatives = 0;
  uint64_t true_positives = 0, false_positives = 0;
  double precision = 0, recall = 0, f1 = 0, accuracy = 0, roc_auc = 0;
  double threshold = 0.5;
};
ClassifierEval classifier_metrics(std::span<const float> positive_scores, std::span<const float> negative_scores,
                                  double threshold = 0.5);

struct ClassifierTrainStats {
  uint64_t train_positive = 0, train_negative = 0;  // lines fastText trained on
  uint64_t valid_positive = 0, valid_negative = 0;  // lines held out
  uint64_t empty_skipped = 0;                       // documents without words
  uint64_t read_issues = 0;                         // records the readers skipped (bad JSON, ...)
  uint64_t words = 0, labels = 0;                   // the trained model's dictionary
  double read_seconds = 0, train_seconds = 0;
  ClassifierEval valid;  // on the held-out lines; positives == negatives == 0 when nothing was held out
};

// Reads both classes, writes the shuffled training lines to a temporary file beside `output`,
// trains through libfasttext, saves the model to a temporary name and renames it over `output`.
// on_progress(fraction done, average loss; -1 while fastText has not computed it) comes from
// fastText's training threads.
Status classifier_train(const ClassifierTrainOptions& opt, ClassifierTrainStats& stats,
                        const std::function<void(double, double)>& on_progress = {});

// Scores every document of the positive and negative files with the model's probability of
// `label` (with or without "__label__") and fills `out`. A model that cannot be loaded or does
// not have the label, a missing or unreadable input, or a class without documents: an error.
Status classifier_eval(const std::string& model_path, const std::vector<std::string>& positive,
                       const std::vector<std::string>& negative, const std::string& label, ClassifierEval& out,
                       const std::string& text_field = "text", double threshold = 0.5);

}  // namespace smelt
