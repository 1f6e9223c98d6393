// `smelt quality train | eval`: fastText quality classifiers (DCLM's recipe) from positive and
// negative documents, and their precision / recall / F1 / accuracy / ROC AUC on labelled documents.
// A readable summary on stderr, JSON in --json PATH ("-": stdout). Not the training or the metrics
// themselves (refine/quality_classifier) nor scoring inside prep.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/log.hpp"
#include "smelt/refine/quality_classifier.hpp"

namespace smelt {

namespace {

nlohmann::json eval_json(const ClassifierEval& e) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"positives", e.positives},         {"negatives", e.negatives},     {"true_positives", e.true_positives},
          {"false_positives", e.false_positives}, {"threshold", e.threshold}, {"precision", num(e.precision)},
          {"recall", num(e.recall)},           {"f1", num(e.f1)},             {"accuracy", num(e.accuracy)},
          {"roc_auc", num(e.roc_auc)}};
}

std::string eval_line(const ClassifierEval& e, const std::string& label) {
  return fmt::format("{} positive, {} negative documents; p({}) >= {}: precision {:.4f}, recall {:.4f}, F1 {:.4f}, "
                     "accuracy {:.4f}; ROC AUC {:.4f}",
                     e.positives, e.negatives, label, e.threshold, e.precision, e.recall, e.f1, e.accuracy, e.roc_auc);
}

// The JSON to --json's PATH (atomically) or to stdout for "-"; nothing without --json.
int emit(const nlohmann::json& j, const std::string& path) {
  if (path.empty()) return kExitOk;
  if (path == "-") {
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  if (Status s = files_write_atomic(path, j.dump(2) + "\n"); !s) {
    spdlog::error("--json {}: {}", path, s.message());
    return kExitFailure;
  }
  return kExitOk;
}

void add_train_flags(CLI::App& app, ClassifierTrainOptions& o) {
  app.add_option("--positive", o.positive, "high-quality documents: files, folders or globs of JSONL(.zst|.gz) or "
                                           "text, a document a line (required)")->required();
  app.add_option("--negative", o.negative, "the documents to tell apart from them, as --positive (required)")
      ->required();
  app.add_option("-o,--output", o.output, "the model file to write (.bin) (required)")->required();
  app.add_option("--positive-label", o.positive_label, "label of the positives (DCLM: hq)");
  app.add_option("--negative-label", o.negative_label, "label of the negatives (DCLM: cc)");
  app.add_option("--dim", o.dim, "size of the word vectors (DCLM: 100)");
  app.add_option("--word-ngrams", o.word_ngrams, "longest word n-gram used as a feature (DCLM: 2)");
  app.add_option("--epoch", o.epoch, "passes over the training lines (DCLM: 5)");
  app.add_option("--lr", o.lr, "learning rate (DCLM: 0.1)");
  app.add_option("--min-count", o.min_count, "words seen fewer times are dropped (DCLM: 1)");
  app.add_option("--bucket", o.bucket, "hash buckets of the word n-grams (fastText: 2000000)");
  app.add_option("--loss", o.loss, "softmax, ns, hs or ova (fastText supervised: softmax)");
  app.add_option("-t,--threads", o.threads, "training threads; only 1 gives the same model every run (default 1)");
  app.add_option("--seed", o.seed, "seed of the split, the shuffle and the initialisation (DCLM: 42)");
  app.add_option("--valid-fraction", o.valid_fraction, "share of the documents held out for the evaluation (0.1)");
  app.add_option("--max-docs-per-class", o.max_docs_per_class, "read at most N documents of each class (0: all)");
  app.add_option("--text-field", o.text_field, "JSONL field holding the text");
}

nlohmann::json train_json(const ClassifierTrainOptions& o, const ClassifierTrainStats& st) {
  nlohmann::json settings = {
      {"positive", o.positive}, {"negative", o.negative}, {"positive_label", o.positive_label},
      {"negative_label", o.negative_label}, {"dim", o.dim}, {"word_ngrams", o.word_ngrams}, {"epoch", o.epoch},
      {"lr", o.lr}, {"min_count", o.min_count}, {"bucket", o.bucket}, {"loss", o.loss}, {"threads", o.threads},
      {"seed", o.seed}, {"valid_fraction", o.valid_fraction}, {"max_docs_per_class", o.max_docs_per_class},
      {"text_field", o.text_field}};
  nlohmann::json counts = {{"train_positive", st.train_positive}, {"train_negative", st.train_negative},
                           {"valid_positive", st.valid_positive}, {"valid_negative", st.valid_negative},
                           {"empty_skipped", st.empty_skipped},   {"read_issues", st.read_issues},
                           {"words", st.words},                   {"labels", st.labels}};
  const bool held_out = st.valid.positives + st.valid.negatives > 0;
  return {{"model", o.output}, {"settings", settings}, {"counts", counts},
          {"valid", held_out ? eval_json(st.valid) : nlohmann::json(nullptr)},
          {"seconds", {{"read", st.read_seconds}, {"train", st.train_seconds}}}};
}

int quality_train(int argc, char** argv) {
  CLI::App app{"smelt quality train: a fastText classifier of positive (high-quality) against negative documents "
               "(DCLM's settings by default), then its scores on the held-out documents"};
  app.name("smelt quality train");
  ClassifierTrainOptions o;
  std::string json_path;
  add_train_flags(app, o);
  app.add_option("--json", json_path, "write the JSON summary here ('-': stdout)");
  if (int rc = cli_parse(app, argc, argv, "quality train"); rc >= 0) return rc;
  if (Status s = classifier_check_options(o); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  spdlog::info("training {} ({} vs {}): dim {}, word n-grams {}, epoch {}, lr {}, min count {}, loss {}, {} thread(s), "
               "seed {}, {}% held out",
               o.output, o.positive_label, o.negative_label, o.dim, o.word_ngrams, o.epoch, o.lr, o.min_count, o.loss,
               o.threads, o.seed, 100 * o.valid_fraction);
  std::atomic<int> reported{0};  // tenths of the training reported so far
  auto progress = [&](double done, double loss) {
    int tenth = static_cast<int>(done * 10), seen = reported.load();
    if (tenth > seen && reported.compare_exchange_strong(seen, tenth))
      spdlog::info("{:3d}% trained{}", tenth * 10, loss >= 0 ? fmt::format(", average loss {:.4f}", loss) : "");
  };
  ClassifierTrainStats st;
  if (Status s = classifier_train(o, st, progress); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  std::fputs(fmt::format("[quality train] {}: {} labels, {} words; trained on {} {} + {} {} documents ({} without "
                         "words skipped, {} unreadable records); read {:.1f} s, train {:.1f} s\n",
                         o.output, st.labels, st.words, st.train_positive, o.positive_label, st.train_negative,
                         o.negative_label, st.empty_skipped, st.read_issues, st.read_seconds, st.train_seconds)
                 .c_str(),
             stderr);
  if (st.valid.positives + st.valid.negatives > 0)
    std::fputs(fmt::format("[quality train] held out: {}\n", eval_line(st.valid, o.positive_label)).c_str(), stderr);
  else
    std::fputs("[quality train] nothing held out (--valid-fraction 0 or too few documents)\n", stderr);
  return emit(train_json(o, st), json_path);
}

int quality_eval(int argc, char** argv) {
  CLI::App app{"smelt quality eval: precision, recall, F1, accuracy and ROC AUC of a fastText classifier on "
               "positive and negative documents"};
  app.name("smelt quality eval");
  std::string model, label = "hq", text_field = "text", json_path;
  std::vector<std::string> positive, negative;
  double threshold = 0.5;
  app.add_option("-m,--model", model, "the fastText model (.bin) (required)")->required();
  app.add_option("--positive", positive, "documents that should score high: JSONL(.zst|.gz) or text (required)")
      ->required();
  app.add_option("--negative", negative, "documents that should score low, as --positive (required)")->required();
  app.add_option("--label", label, "the model's positive label, with or without __label__ (default hq)");
  app.add_option("--threshold", threshold, "p(label) at or above it counts as positive (default 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--text-field", text_field, "JSONL field holding the text");
  app.add_option("--json", json_path, "write the JSON result here ('-': stdout)");
  if (int rc = cli_parse(app, argc, argv, "quality eval"); rc >= 0) return rc;
  ClassifierEval e;
  if (Status s = classifier_eval(model, positive, negative, label, e, text_field, threshold); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  std::fputs(fmt::format("[quality eval] {}: {}\n", model, eval_line(e, label)).c_str(), stderr);
  nlohmann::json j = eval_json(e);
  j["model"] = model;
  j["label"] = label;
  return emit(j, json_path);
}

}  // namespace

int cli_quality(int argc, char** argv) {
  const char* usage =
      "usage: smelt quality <train|eval> [options]\n"
      "  train    positive and negative documents -> a fastText classifier (.bin)\n"
      "  eval     a classifier's precision, recall, F1, accuracy and ROC AUC on labelled documents\n";
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  std::string sub = argv[1];
  if (sub == "train") return quality_train(argc - 1, argv + 1);
  if (sub == "eval") return quality_eval(argc - 1, argv + 1);
  std::fprintf(stderr, "smelt quality: unknown command '%s'\n%s", sub.c_str(), usage);
  return kExitUsage;
}

}  // namespace smelt
