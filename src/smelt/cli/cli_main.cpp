// Subcommand dispatch shared by both binaries: usage text from the command table, --version, then
// the call.
// Not the table (command_table.hpp) nor the exec into smelt-full (main.cpp).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "smelt/cli/command_table.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/status.hpp"

namespace smelt {

static std::string usage(std::span<const Command> table) {
  std::string u = "usage: smelt <command> [options]\ncommands:\n";
  for (const Command& c : table) {
    std::string name = c.name;
    name.resize(std::max<size_t>(name.size() + 1, 10), ' ');
    u += "  " + name + c.summary + "\n";
  }
  return u + "run 'smelt <command> --help' for its options; 'smelt --version' for the version\n";
}

int cli_main(std::span<const Command> table, int argc, char** argv, int (*elsewhere)(int, char**)) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(usage(table).c_str(), argc < 2 ? stderr : stdout);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V")) {
    std::printf("smelt %s (commit %s, built with GCC %d.%d.%d)\n", cli_version(), cli_source_commit(), __GNUC__,
                __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
    return kExitOk;
  }
  for (const Command& c : table) {
    if (std::strcmp(argv[1], c.name)) continue;
    if (c.run) return c.run(argc - 1, argv + 1);
    return elsewhere(argc, argv);
  }
  std::fprintf(stderr, "smelt: unknown command '%s'\n%s", argv[1], usage(table).c_str());
  return kExitUsage;
}

}  // namespace smelt
