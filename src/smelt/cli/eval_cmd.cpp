// `smelt eval`: not built yet (in progress); the file is replaced by its implementation.
#include <cstdio>

#include "smelt/cli/commands.hpp"
#include "smelt/common/status.hpp"

namespace smelt {

int cli_eval(int, char**) {
  std::fputs("smelt eval: not available in this build\n", stderr);
  return kExitFailure;
}

}  // namespace smelt
