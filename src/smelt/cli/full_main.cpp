// The full `smelt-full` binary: every command, linked with MPI, OpenBLAS, OpenMP and oneDNN. The
// light `smelt` execs it for the commands that need them (command_table.hpp); it also runs alone.
#include "smelt/cli/command_table.hpp"
#include "smelt/cli/commands.hpp"

namespace smelt {

namespace {
#define SMELT_FULL_ROW(name, fn, where, summary) {name, summary, &smelt::fn},
constexpr Command kCommands[] = {SMELT_COMMANDS(SMELT_FULL_ROW)};
}  // namespace

// The full binary's whole process: per-process start-up of the heavy libraries goes here, before
// any command runs.
int full_main(int argc, char** argv) { return cli_main(kCommands, argc, argv, nullptr); }

}  // namespace smelt

int main(int argc, char** argv) { return smelt::full_main(argc, argv); }
