// `smelt tokenizer encode|decode` (and dispatch of `train` to tokenizer_train_cmd.cpp).
// Placeholder until the encoder lands: says so and fails.
#include <cstdio>

#include "smelt/cli/commands.hpp"
#include "smelt/common/status.hpp"

namespace smelt {
int cli_tokenizer(int, char**) {
  std::fputs("smelt tokenizer: not built yet\n", stderr);
  return kExitFailure;
}
}  // namespace smelt
