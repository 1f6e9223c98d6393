// Training and evaluation of fastText quality classifiers (quality_classifier.hpp).
//
// Determinism: a document's side of the split and its place in the training file come from hashes
// of its training line (seeded), never from input order, so the same documents in any file order
// give the same training file; with one thread fastText's training is then a pure function of that
// file and the seed, and the model is byte-identical run to run. The options reach fastText's Args
// exactly as `fasttext supervised` sets them (model sup, no character n-grams, buckets 0 when there
// are no word n-grams), so the tool trains the same model from the same file.
#include "smelt/refine/quality_classifier.hpp"

#include <fasttext/fasttext.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "smelt/common/files.hpp"
#include "smelt/common/hash.hpp"
#include "smelt/refine/fasttext_model.hpp"
#include "smelt/text/doc_reader.hpp"

namespace smelt {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kLabelPrefix = "__label__";
constexpr uint64_t kOrderSalt = 0x5eed0fde7e57ull;  // the shuffle's hash differs from the split's

// fastText's word separators (Dictionary::readWord).
bool ft_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f' || c == '\0';
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Calls fn(text) for each document of the expanded `patterns`, at most max_docs (0: all) in input
// order. JSONL(.gz|.zst) gives text_field; plain text a document a line. HTML or WARC: an error.
Status read_documents(const std::vector<std::string>& patterns, const std::string& text_field, uint64_t max_docs,
                      uint64_t& issues, const std::function<void(std::string&)>& fn) {
  std::vector<std::string> files;
  if (Status s = files_expand_inputs(patterns, files); !s) return s;
  ReaderOptions ro;
  ro.text_field = text_field;
  ro.text_unit = TextUnit::kLine;
  uint64_t n = 0;
  for (const std::string& f : files) {
    Status err;
    std::unique_ptr<DocReader> r = doc_reader_open(f, ro, err);
    if (!r) return Status::error(fmt::format("{}: cannot read it: {}", f, err.message()));
    if (r->format() == InputFormat::kHtml || r->format() == InputFormat::kWarc)
      return Status::error(fmt::format("{}: {} input; expected refined JSONL (.jsonl, .jsonl.zst, .jsonl.gz) or "
                                       "plain text with a document a line (run `smelt prep` on HTML and WARC first)",
                                       f, input_format_name(r->format())));
    size_t logged = 0;
    r->on_issue = [&](const ReadIssue& is) {
      ++issues;
      if (logged++ < 5) spdlog::warn("{}", is.message);
    };
    RawDoc d;
    while ((max_docs == 0 || n < max_docs) && r->next(d)) {
      ++n;
      fn(d.text);
    }
    if (max_docs != 0 && n >= max_docs) break;
  }
  return Status::ok();
}

// One class's documents as training lines, appended to `lines` ([i] a line, is_pos[i] its class).
Status read_class(const ClassifierTrainOptions& opt, bool positive, std::vector<std::string>& lines,
                  std::vector<bool>& is_pos, ClassifierTrainStats& stats) {
  const std::string& label = positive ? opt.positive_label : opt.negative_label;
  const size_t before = lines.size();
  Status s = read_documents(positive ? opt.positive : opt.negative, opt.text_field, opt.max_docs_per_class,
                            stats.read_issues, [&](std::string& text) {
                              std::string line = classifier_training_line(label, text);
                              if (line.empty()) {
                                ++stats.empty_skipped;
                                return;
                              }
                              lines.push_back(std::move(line));
                              is_pos.push_back(positive);
                            });
  if (!s) return Status::error(fmt::format("--{}: {}", positive ? "positive" : "negative", s.message()));
  if (lines.size() == before)
    return Status::error(fmt::format("no {} documents with words in {} (--{}): expected JSONL with a '{}' field "
                                     "or plain text with a document a line",
                                     positive ? "positive" : "negative",
                                     fmt::join(positive ? opt.positive : opt.negative, ", "),
                                     positive ? "positive" : "negative", opt.text_field));
  return Status::ok();
}

fasttext::loss_name loss_from(const std::string& name) {
  if (name == "ns") return fasttext::loss_name::ns;
  if (name == "hs") return fasttext::loss_name::hs;
  if (name == "ova" || name == "one-vs-all") return fasttext::loss_name::ova;
  return fasttext::loss_name::softmax;
}

// fastText's Args as `fasttext supervised -input FILE` plus the options sets them (Args::parseArgs).
fasttext::Args supervised_args(const ClassifierTrainOptions& opt, const std::string& input) {
  fasttext::Args a;
  a.input = input;
  a.output = opt.output;
  a.model = fasttext::model_name::sup;
  a.loss = loss_from(opt.loss);
  a.minn = 0;
  a.maxn = 0;
  a.lr = opt.lr;
  a.dim = opt.dim;
  a.epoch = opt.epoch;
  a.minCount = opt.min_count;
  a.wordNgrams = opt.word_ngrams;
  a.bucket = opt.word_ngrams <= 1 ? 0 : opt.bucket;  // the tool's rule: no n-grams, no hash table
  a.thread = opt.threads;
  a.seed = opt.seed;
  a.verbose = 0;
  return a;
}

// Writes the training lines to path, ordered by a seeded hash (then by text, so ties are ordered).
Status write_training_file(const std::string& path, const std::vector<std::string>& lines,
                           const std::vector<uint32_t>& train, uint64_t seed) {
  std::vector<std::pair<uint64_t, uint32_t>> order;  // (hash, index into lines)
  order.reserve(train.size());
  for (uint32_t i : train) order.emplace_back(hash64(lines[i], seed ^ kOrderSalt), i);
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : lines[a.second] < lines[b.second];
  });
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::error(fmt::format("{}: cannot write the training file: {}", path, std::strerror(errno)));
  for (const auto& [h, i] : order) out << lines[i] << '\n';
  out.close();
  if (!out) return Status::error(fmt::format("{}: cannot write the training file (disk full?)", path));
  return Status::ok();
}

// fsync(path), then rename it over `to` and fsync the folder.
Status commit_file(const std::string& tmp, const std::string& to) {
  int fd = ::open(tmp.c_str(), O_RDONLY);
  if (fd < 0 || ::fsync(fd) != 0) {
    if (fd >= 0) ::close(fd);
    return Status::error(fmt::format("{}: cannot sync the model: {}", tmp, std::strerror(errno)));
  }
  ::close(fd);
  std::error_code ec;
  fs::rename(tmp, to, ec);
  if (ec) return Status::error(fmt::format("{}: cannot rename {} over it: {}", to, tmp, ec.message()));
  fs::path dir = fs::path(to).parent_path();
  return files_fsync_dir(dir.empty() ? "." : dir.string());
}

// Trains on the training file and saves the model at `output` (atomically).
Status train_and_save(const ClassifierTrainOptions& opt, const std::string& train_path,
                      const std::function<void(double, double)>& on_progress, ClassifierTrainStats& stats) {
  const std::string tmp = opt.output + fmt::format(".tmp-{}", ::getpid());
  fasttext::FastText ft;
  try {
    fasttext::FastText::TrainCallback cb;
    if (on_progress)
      cb = [&](float progress, float loss, double, double, int64_t) { on_progress(progress, loss); };
    ft.train(supervised_args(opt, train_path), cb);
    stats.words = static_cast<uint64_t>(ft.getDictionary()->nwords());
    stats.labels = static_cast<uint64_t>(ft.getDictionary()->nlabels());
    ft.saveModel(tmp);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return Status::error(fmt::format("{}: fastText training failed: {}", opt.output, e.what()));
  }
  Status s = commit_file(tmp, opt.output);
  if (!s) {
    std::error_code ec;
    fs::remove(tmp, ec);
  }
  return s;
}

// Scores lines[i] (a training line: its label, then the text) with the model's positive label.
Status eval_held_out(const ClassifierTrainOptions& opt, const std::vector<std::string>& lines,
                     const std::vector<bool>& is_pos, const std::vector<uint32_t>& valid, ClassifierEval& out) {
  std::unique_ptr<FastTextModel> model;
  if (Status s = FastTextModel::load(opt.output, model); !s) return s;
  const int label = model->label_index(opt.positive_label);
  if (label < 0)
    return Status::error(fmt::format("{}: the trained model lacks the label {}", opt.output, opt.positive_label));
  std::vector<float> pos, neg;
  for (uint32_t i : valid) {
    std::string_view line = lines[i];
    line.remove_prefix(std::min(line.size(), line.find(' ') + 1));
    (is_pos[i] ? pos : neg).push_back(model->probability(line, label));
  }
  out = classifier_metrics(pos, neg);
  return Status::ok();
}

}  // namespace

Status classifier_check_options(const ClassifierTrainOptions& opt) {
  auto bad_label = [](const std::string& l) {
    return l.empty() || l.rfind(kLabelPrefix, 0) == 0 || std::any_of(l.begin(), l.end(), ft_space);
  };
  if (opt.positive.empty() || opt.negative.empty()) return Status::error("--positive and --negative each need a file");
  if (opt.output.empty()) return Status::error("--output: the model file to write is missing");
  if (bad_label(opt.positive_label) || bad_label(opt.negative_label))
    return Status::error("--positive-label, --negative-label: a word without spaces and without \"__label__\"");
  if (opt.positive_label == opt.negative_label) return Status::error("--positive-label equals --negative-label");
  if (opt.dim < 1 || opt.epoch < 1 || opt.word_ngrams < 1 || opt.min_count < 1 || opt.threads < 1)
    return Status::error("--dim, --epoch, --word-ngrams, --min-count and --threads must be at least 1");
  if (!(opt.lr > 0)) return Status::error("--lr must be positive");
  if (opt.bucket < 1) return Status::error("--bucket must be at least 1");
  if (opt.loss != "softmax" && opt.loss != "ns" && opt.loss != "hs" && opt.loss != "ova" && opt.loss != "one-vs-all")
    return Status::error(fmt::format("--loss {}: expected softmax, ns, hs or ova", opt.loss));
  if (!(opt.valid_fraction >= 0 && opt.valid_fraction < 1)) return Status::error("--valid-fraction must be in [0, 1)");
  if (opt.text_field.empty()) return Status::error("--text-field is empty");
  return Status::ok();
}

std::string classifier_training_line(std::string_view label, std::string_view text) {
  std::string s = FastTextModel::one_line(text);
  bool words = false;
  for (size_t i = 0; i < s.size();) {
    if (ft_space(s[i])) {
      ++i;
      continue;
    }
    size_t e = i;
    while (e < s.size() && !ft_space(s[e])) ++e;
    if (std::string_view(s).substr(i, e - i).starts_with(kLabelPrefix))
      std::fill(s.begin() + i, s.begin() + e, ' ');
    else
      words = true;
    i = e;
  }
  if (!words) return {};
  return fmt::format("{}{} {}", kLabelPrefix, label, s);
}

ClassifierEval classifier_metrics(std::span<const float> pos, std::span<const float> neg, double threshold) {
  ClassifierEval e;
  e.threshold = threshold;
  e.positives = pos.size();
  e.negatives = neg.size();
  for (float p : pos) e.true_positives += p >= threshold;
  for (float p : neg) e.false_positives += p >= threshold;
  const uint64_t predicted = e.true_positives + e.false_positives, n = e.positives + e.negatives;
  const uint64_t true_negatives = e.negatives - e.false_positives;
  e.precision = predicted ? double(e.true_positives) / predicted : 0.0;
  e.recall = e.positives ? double(e.true_positives) / e.positives : 0.0;
  e.f1 = e.precision + e.recall > 0 ? 2 * e.precision * e.recall / (e.precision + e.recall) : 0.0;
  e.accuracy = n ? double(e.true_positives + true_negatives) / n : 0.0;
  if (pos.empty() || neg.empty()) {
    e.roc_auc = std::numeric_limits<double>::quiet_NaN();
    return e;
  }
  // Mann-Whitney U: the positives' rank sum (ranks from 1, ties averaged) less its minimum.
  std::vector<std::pair<float, bool>> all;  // (score, positive)
  all.reserve(n);
  for (float p : pos) all.emplace_back(p, true);
  for (float p : neg) all.emplace_back(p, false);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  double rank_sum = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    uint64_t in_group = 0;
    for (; j < all.size() && all[j].first == all[i].first; ++j) in_group += all[j].second;
    rank_sum += in_group * ((i + 1) + j) / 2.0;  // ranks i+1 .. j, averaged
    i = j;
  }
  const double np = double(e.positives), nn = double(e.negatives);
  e.roc_auc = (rank_sum - np * (np + 1) / 2) / (np * nn);
  return e;
}

Status classifier_train(const ClassifierTrainOptions& opt, ClassifierTrainStats& stats,
                        const std::function<void(double, double)>& on_progress) {
  if (Status s = classifier_check_options(opt); !s) return s;
  stats = ClassifierTrainStats{};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> lines;
  std::vector<bool> is_pos;
  if (Status s = read_class(opt, true, lines, is_pos, stats); !s) return s;
  if (Status s = read_class(opt, false, lines, is_pos, stats); !s) return s;
  std::vector<uint32_t> train, valid;
  for (uint32_t i = 0; i < lines.size(); ++i) {
    const bool held_out = hash_unit(hash64(lines[i], static_cast<uint64_t>(opt.seed))) < opt.valid_fraction;
    (held_out ? valid : train).push_back(i);
    (held_out ? (is_pos[i] ? stats.valid_positive : stats.valid_negative)
              : (is_pos[i] ? stats.train_positive : stats.train_negative))++;
  }
  if (stats.train_positive == 0 || stats.train_negative == 0)
    return Status::error(fmt::format("{}: after holding out --valid-fraction {}, a class has no training documents "
                                     "({} positive, {} negative); give more documents or a smaller fraction",
                                     opt.output, opt.valid_fraction, stats.train_positive, stats.train_negative));
  stats.read_seconds = seconds_since(t0);
  const std::string train_path = opt.output + fmt::format(".train-{}.txt", ::getpid());
  struct Remove {
    const std::string& p;
    ~Remove() { std::error_code ec; fs::remove(p, ec); }
  } remove_train{train_path};
  if (Status s = write_training_file(train_path, lines, train, static_cast<uint64_t>(opt.seed)); !s) return s;
  t0 = std::chrono::steady_clock::now();
  if (Status s = train_and_save(opt, train_path, on_progress, stats); !s) return s;
  stats.train_seconds = seconds_since(t0);
  if (valid.empty()) return Status::ok();
  return eval_held_out(opt, lines, is_pos, valid, stats.valid);
}

Status classifier_eval(const std::string& model_path, const std::vector<std::string>& positive,
                       const std::vector<std::string>& negative, const std::string& label, ClassifierEval& out,
                       const std::string& text_field, double threshold) {
  std::unique_ptr<FastTextModel> model;
  if (Status s = FastTextModel::load(model_path, model); !s) return s;
  const int li = model->label_index(label);
  if (li < 0)
    return Status::error(fmt::format("{}: the model has no label '{}'; its labels are {}", model_path, label,
                                     fmt::join(model->labels(), ", ")));
  std::vector<float> scores[2];  // [0] positives, [1] negatives
  uint64_t issues = 0;
  for (int c = 0; c < 2; ++c) {
    Status s = read_documents(c == 0 ? positive : negative, text_field, 0, issues,
                              [&](std::string& text) { scores[c].push_back(model->probability(text, li)); });
    if (!s) return Status::error(fmt::format("--{}: {}", c == 0 ? "positive" : "negative", s.message()));
    if (scores[c].empty())
      return Status::error(fmt::format("no {} documents in {}: expected JSONL with a '{}' field or plain text with a "
                                       "document a line",
                                       c == 0 ? "positive" : "negative", fmt::join(c == 0 ? positive : negative, ", "),
                                       text_field));
  }
  out = classifier_metrics(scores[0], scores[1], threshold);
  return Status::ok();
}

}  // namespace smelt
