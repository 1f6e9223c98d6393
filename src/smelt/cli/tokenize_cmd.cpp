// `smelt tokenize`. Placeholder until the dataset writer lands: says so and fails.
#include <cstdio>

#include "smelt/cli/commands.hpp"
#include "smelt/common/status.hpp"

namespace smelt {
int cli_tokenize(int, char**) {
  std::fputs("smelt tokenize: not built yet\n", stderr);
  return kExitFailure;
}
}  // namespace smelt
