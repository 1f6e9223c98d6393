// `smelt export --format hf`: a checkpoint (step or run directory) -> a Hugging Face Llama folder
// (model.safetensors, config.json, tokenizer.json) that LlamaForCausalLM.from_pretrained loads;
// --check reads it back and compares logits. Not the export itself (ckpt/export_hf.cpp), not GGUF.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/export_hf.hpp"
#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/cli/resolve_checkpoint.hpp"
#include "smelt/common/log.hpp"

namespace smelt {

namespace {
// Peak resident memory of this process image in bytes (VmHWM of /proc/self/status; 0 when absent).
// Unlike getrusage's ru_maxrss it does not include the image before exec.
int64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:  1234 kB"
  return 0;
}
}  // namespace

int cli_export(int argc, char** argv) {
  CLI::App app{"smelt export: a checkpoint -> Hugging Face Llama layout (model.safetensors, config.json, "
               "tokenizer.json), streamed one tensor at a time"};
  app.name("smelt export");
  std::string ckpt, format = "hf", output, tok_path;
  bool check = false, json = false;
  app.add_option("--checkpoint", ckpt, "step directory or run directory (its newest valid checkpoint) (required)")
      ->required();
  app.add_option("--format", format, "hf (Hugging Face LlamaForCausalLM, F32 safetensors); gguf is not built yet");
  app.add_option("-o,--output", output, "folder to write (created; files in it are replaced) (required)")->required();
  app.add_option("--tokenizer", tok_path, "tokenizer.json to include (default: the checkpoint's copy)");
  app.add_flag("--check", check, "read the export back, run a fixed batch with both weight sets, exit 1 on any "
               "difference in the logits");
  app.add_flag("--json", json, "print a JSON summary on stdout");
  if (int rc = cli_parse(app, argc, argv, "export"); rc >= 0) return rc;
  if (format != "hf") {
    spdlog::error("--format {}: only 'hf' (Hugging Face Llama safetensors + config.json) is available", format);
    return kExitUsage;
  }
  std::string step_dir;
  if (Status s = cli_resolve_checkpoint(ckpt, step_dir); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  auto t0 = std::chrono::steady_clock::now();
  HfExportStats st;
  if (Status s = export_hf(step_dir, output, tok_path, &st); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string check_result = "not run";
  double diff = 0;
  if (check) {
    if (Status s = export_hf_check(step_dir, output, &diff); !s) {
      spdlog::error("--check failed: {}", s.message());
      return kExitFailure;
    }
    check_result = "passed";
  }
  std::fputs(fmt::format("[export] {} -> {}: {} tensors, {:.1f} MiB model.safetensors (largest tensor {:.1f} MiB), "
                         "config.json{}, {:.2f} s; check {}{}\n",
                         step_dir, output, st.tensors, st.bytes / 1048576.0, st.largest_tensor / 1048576.0,
                         st.tokenizer ? ", tokenizer.json" : " (no tokenizer)", secs, check_result,
                         check ? " (logits identical)" : "")
                 .c_str(),
             stderr);
  if (json) {
    nlohmann::json j = {{"checkpoint", step_dir}, {"output", output}, {"format", format},
                        {"tensors", st.tensors}, {"bytes", st.bytes}, {"largest_tensor_bytes", st.largest_tensor},
                        {"tokenizer", st.tokenizer}, {"seconds", secs}, {"check", check_result},
                        {"check_max_abs_diff", diff}, {"peak_rss_bytes", peak_rss_bytes()}};
    std::fputs((j.dump() + "\n").c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace smelt
