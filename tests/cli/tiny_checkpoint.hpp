// Test helper for the commands that read checkpoints (generate, export): a random-init tiny model
// saved through ckpt_save with a tokenizer trained by the smelt binary on tests/data text.
// Not a checkpoint test (tests/ckpt/checkpoint_test.cpp).
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/model/config.hpp"
#include "smelt/model/model.hpp"
#include "smelt/model/params.hpp"

namespace smelt::test {

// Trains a byte-level BPE tokenizer of `vocab` ids (one special, <|endoftext|>) into path.
inline bool train_tiny_tokenizer(const std::string& path, int vocab) {
  std::string data = std::string(SMELT_TEST_DATA) + "/tokenizer_train/";
  std::string cmd = std::string(SMELT_BINARY) + " tokenizer train -i " + data + "en_coding_style.rst " +
                    data + "zh_coding_style.rst --vocab-size " + std::to_string(vocab) +
                    " -t 1 --log-level error -o " + path + " 2> /dev/null";
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// Saves a flat parameter buffer of model c (layout param_layout(c)) as step `step` of run_dir:
// the config's [model] section, the tokenizer copied in.
inline Status save_checkpoint_params(const ModelConfig& c, const float* params, const std::string& run_dir,
                                     int64_t step, const std::string& tokenizer) {
  CkptSaveRequest r;
  r.step = step;
  toml::table root{{"model", model_config_to_toml(c)}};
  std::ostringstream os;
  os << root;
  r.config_toml = os.str();
  r.tokenizer_path = tokenizer;
  r.state = nlohmann::json::object();
  for (const auto& t : param_layout(c).tensors)
    r.tensors.push_back({t.name, t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.rows, t.cols},
                         params + t.offset});
  return ckpt_save(run_dir, r);
}

// Saves m's parameters as step `step` of run_dir.
inline Status save_tiny_checkpoint(Model& m, const std::string& run_dir, int64_t step,
                                   const std::string& tokenizer) {
  return save_checkpoint_params(m.config(), m.params(), run_dir, step, tokenizer);
}

struct CmdResult {
  int rc = -1;
  std::string out, err;
};

// Runs the smelt binary with args; stdout and stderr captured through files in dir.
inline CmdResult run_smelt(const std::string& args, const std::filesystem::path& dir) {
  std::string out = (dir / "stdout.txt").string(), err = (dir / "stderr.txt").string();
  int st = std::system((std::string(SMELT_BINARY) + " " + args + " > " + out + " 2> " + err).c_str());
  CmdResult r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace smelt::test
