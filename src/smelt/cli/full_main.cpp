// The full `smelt-full` binary: every command, linked with MPI, OpenBLAS, OpenMP and oneDNN. The
// light `smelt` execs it for the commands that need them (command_table.hpp); it also runs alone.
#include "smelt/cli/command_table.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/machine/cpu_info.hpp"

namespace smelt {

namespace {
#define SMELT_FULL_ROW(name, fn, where, summary) {name, summary, &smelt::fn},
constexpr Command kCommands[] = {SMELT_COMMANDS(SMELT_FULL_ROW)};
}  // namespace

// The full binary's whole process: per-process start-up of the heavy libraries goes here, before
// any command runs.
int full_main(int argc, char** argv) {
  // OpenBLAS chose its kernels while loading; a generic core on a newer CPU is fixed here by one
  // re-exec with OPENBLAS_CORETYPE set (machine/cpu_info.hpp), before any GEMM runs.
  blas_core_fix(argc, argv);
  return cli_main(kCommands, argc, argv, nullptr);
}

}  // namespace smelt

int main(int argc, char** argv) { return smelt::full_main(argc, argv); }
