// A checkpoint for the serving benchmarks: random weights (the model's init) of a [model] config,
// saved as step 0 of RUN with a tokenizer, so `smelt export --format gguf`, `smelt generate` and
// `smelt serve` have something of the right shape to load. Decode speed does not depend on the
// weights' values. Usage: bench_checkpoint CONFIG.toml TOKENIZER.json RUN_DIR [SEED]
// Not a trainer and not a test helper.
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "smelt/ckpt/checkpoint.hpp"
#include "smelt/common/config.hpp"
#include "smelt/model/model.hpp"

using namespace smelt;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_checkpoint CONFIG.toml TOKENIZER.json RUN_DIR [SEED]\n");
    return 2;
  }
  toml::table root;
  if (auto s = config_load(argv[1], root); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  ModelConfig c;
  if (auto s = model_config_read(root, c); !s) {
    std::fprintf(stderr, "%s: %s\n", argv[1], s.message().c_str());
    return 1;
  }
  c.recompute = false;
  Model m;
  if (auto s = m.init(c, 1, 8, 2, argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 1); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  CkptSaveRequest r;
  r.step = 0;
  toml::table out{{"model", model_config_to_toml(c)}};
  std::ostringstream os;
  os << out;
  r.config_toml = os.str();
  r.tokenizer_path = argv[2];
  r.state = nlohmann::json::object();
  for (const auto& t : m.layout().tensors)
    r.tensors.push_back({t.name, t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.rows, t.cols},
                         m.params() + t.offset});
  if (auto s = ckpt_save(argv[3], r); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  std::printf("%s: %lld parameters\n", argv[3], (long long)m.layout().total);
  return 0;
}
