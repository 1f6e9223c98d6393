// The full `smelt-full` binary: every command, linked with MPI, OpenBLAS, OpenMP and oneDNN. The
// light `smelt` execs it for the commands that need them (command_table.hpp); it also runs alone.
#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "smelt/cli/command_table.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/cli/prep_reference.hpp"
#include "smelt/hw/cpu_info.hpp"

namespace smelt {

namespace {
// `smelt serve` shares the cores with its HTTP threads, and OpenMP workers that spin between the
// decoder's parallel regions (libgomp's default) starve them: on 2 cores the streamed tokens came
// 100-250 ms apart instead of a few ms. libgomp reads OMP_WAIT_POLICY once, when it loads, so the
// server gets the passive policy by one re-exec; a policy the user set is kept.
void serve_wait_policy(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "serve") != 0 || std::getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // failed: carry on spinning
}

#define SMELT_FULL_ROW(name, fn, where, summary) {name, summary, &smelt::fn},
constexpr Command kCommands[] = {SMELT_COMMANDS(SMELT_FULL_ROW)};
}  // namespace

// The full binary's whole process: per-process start-up of the heavy libraries goes here, before
// any command runs.
int full_main(int argc, char** argv) {
  set_prep_reference_factory(&prep_reference_make);  // prep's [prep.perplexity] runs the decoder here
  serve_wait_policy(argc, argv);
  // OpenBLAS chose its kernels while loading; a generic core on a newer CPU is fixed here by one
  // re-exec with OPENBLAS_CORETYPE set (hw/cpu_info.hpp), before any GEMM runs.
  blas_core_fix(argc, argv);
  // Blocks of 128 KiB and more are mapped, and unmapped when freed, at a fixed threshold. glibc's
  // default raises the threshold each time such a block is freed, so later blocks of up to 32 MiB
  // come from the heap and stay resident once freed: a training run's peak RSS then carried 7-17 MB
  // more than its memory plan, varying with the model and from run to run (2-layer test models,
  // d 128-256, vocabulary 2-4k), which `smelt plan` cannot predict. Fixed, the rest was 27-30 MB.
  // The cost is page faults at start-up (the GEMM measurement's operands), none per step.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  return cli_main(kCommands, argc, argv, nullptr);
}

}  // namespace smelt

int main(int argc, char** argv) { return smelt::full_main(argc, argv); }
