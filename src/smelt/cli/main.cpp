// The light `smelt` binary: runs prep, tokenizer and tokenize itself and execs `smelt-full` (the
// file next to it) for every other command. It links no MPI, BLAS, OpenMP or oneDNN, so their
// loading and constructors never cost a tokenizer run; see command_table.hpp.
#include "smelt/cli/command_table.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/cli/full_exec.hpp"
#include "smelt/common/status.hpp"

namespace {

#define SMELT_ENTRY_LIGHT(fn) &smelt::fn
#define SMELT_ENTRY_FULL(fn) nullptr
#define SMELT_LIGHT_ROW(name, fn, where, summary) {name, summary, SMELT_ENTRY_##where(fn)},
constexpr smelt::Command kCommands[] = {SMELT_COMMANDS(SMELT_LIGHT_ROW)};

}  // namespace

int main(int argc, char** argv) { return smelt::cli_main(kCommands, argc, argv, smelt::exec_full_binary); }
