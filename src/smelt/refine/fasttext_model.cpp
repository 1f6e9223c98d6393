// fastText model files through libfasttext (fasttext_model.hpp). The library reads a model from a
// stream and predicts from one line of a stream; this file checks the header first (so a wrong file
// gets our message, not the library's), checks that the stream held the whole model, and feeds each
// prediction the exact line the tool would read.
#include "smelt/refine/fasttext_model.hpp"

#include <fasttext/fasttext.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace smelt {

namespace {

constexpr int32_t kFastTextMagic = 793712314;  // fastText's FASTTEXT_FILEFORMAT_MAGIC_INT32
constexpr int32_t kFastTextVersion = 12;       // FASTTEXT_VERSION, the format 0.9.x writes
constexpr std::string_view kLabelPrefix = "__label__";

// The model file as the library reads it, except that past its end it reads zeros and remembers
// it did. fastText's loader does not check the stream while it reads the dictionary's words
// (`while ((c = in.get()) != 0)`): at a cut among them it would grow one word until memory ran
// out (minutes, gigabytes). Zeros end each such loop at once; overran() then says "truncated".
class PaddedFileBuf : public std::streambuf {
 public:
  bool open(const std::string& path) { return file_.open(path, std::ios::in | std::ios::binary) != nullptr; }
  bool overran() const { return overran_; }

 protected:
  int_type underflow() override {
    std::streamsize n = file_.sgetn(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    if (n <= 0) {
      overran_ = true;
      std::fill(buf_.begin(), buf_.end(), '\0');
      n = static_cast<std::streamsize>(buf_.size());
    }
    setg(buf_.data(), buf_.data(), buf_.data() + n);
    return traits_type::to_int_type(buf_[0]);
  }

 private:
  std::filebuf file_;
  std::vector<char> buf_ = std::vector<char>(1 << 20);
  bool overran_ = false;
};

Status check_header(const std::string& path, std::istream& in, const PaddedFileBuf& buf) {
  int32_t magic = 0, version = 0;
  in.read(reinterpret_cast<char*>(&magic), sizeof magic);
  in.read(reinterpret_cast<char*>(&version), sizeof version);
  if (!in || buf.overran() || magic != kFastTextMagic)
    return Status::error(fmt::format("{}: not a fastText model file (expected a .bin or .ftz written by "
                                       "fastText 0.9, which starts with the magic number {})",
                                       path, kFastTextMagic));
  if (version > kFastTextVersion)
    return Status::error(fmt::format("{}: fastText format version {}; this build reads versions up to {}", path,
                                       version, kFastTextVersion));
  return Status::ok();  // the library's loadModel(istream) reads on from here, as its loadModel(path) does
}

}  // namespace

Status FastTextModel::load(const std::string& path, std::unique_ptr<FastTextModel>& out) {
  PaddedFileBuf buf;
  if (!buf.open(path)) return Status::error(fmt::format("{}: cannot open the fastText model file", path));
  std::istream in(&buf);
  if (Status s = check_header(path, in, buf); !s) return s;
  auto m = std::unique_ptr<FastTextModel>(new FastTextModel());
  m->path_ = path;
  m->ft_ = std::make_unique<fasttext::FastText>();
  try {
    m->ft_->loadModel(in);
  } catch (const std::exception& e) {
    return Status::error(fmt::format("{}: the fastText library could not load it: {}", path, e.what()));
  }
  if (!in || buf.overran())
    return Status::error(fmt::format("{}: truncated fastText model (the file ends inside the model)", path));
  if (m->ft_->getArgs().model != fasttext::model_name::sup)
    return Status::error(fmt::format("{}: a word-vector (unsupervised) fastText model; expected a supervised "
                                       "classifier or language-ID model (trained with `fasttext supervised`)",
                                       path));
  const auto dict = m->ft_->getDictionary();
  for (int32_t i = 0; i < dict->nlabels(); ++i) {
    std::string l = dict->getLabel(i);
    if (l.rfind(kLabelPrefix, 0) == 0) l.erase(0, kLabelPrefix.size());
    m->labels_.push_back(std::move(l));
  }
  if (m->labels_.empty()) return Status::error(fmt::format("{}: the fastText model has no labels", path));
  out = std::move(m);
  return Status::ok();
}

FastTextModel::~FastTextModel() = default;

int FastTextModel::label_index(std::string_view label) const {
  if (label.substr(0, kLabelPrefix.size()) == kLabelPrefix) label.remove_prefix(kLabelPrefix.size());
  for (size_t i = 0; i < labels_.size(); ++i)
    if (labels_[i] == label) return static_cast<int>(i);
  return -1;
}

std::string FastTextModel::one_line(std::string_view text) {
  std::string s(text);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

void FastTextModel::predict(std::string_view text, int k, std::vector<std::pair<int, float>>& out) const {
  out.clear();
  // The tool's line: the text on one line, ended by the newline that adds fastText's end-of-sentence
  // word "</s>".
  std::istringstream in(one_line(text) + "\n");
  std::vector<int32_t> words, labels;
  ft_->getDictionary()->getLine(in, words, labels);
  fasttext::Predictions preds;  // (log probability, label index)
  ft_->predict(k <= 0 ? -1 : k, words, preds, 0.0);
  for (const auto& [logp, label] : preds) out.emplace_back(label, std::exp(logp));
}

float FastTextModel::probability(std::string_view text, int label) const {
  std::vector<std::pair<int, float>> all;
  predict(text, 0, all);
  for (const auto& [l, p] : all)
    if (l == label) return p;
  return 0;
}

}  // namespace smelt
