// `smelt export`: a checkpoint (step or run directory) -> a Hugging Face Llama folder
// (model.safetensors, config.json, tokenizer.json) that LlamaForCausalLM.from_pretrained loads, or
// one GGUF file (F32/F16/Q8_0) that llama.cpp loads, or a LoRA run's adapters in PEFT's layout;
// --check reads the export back and compares logits. Not the exports themselves
// (ckpt/export_hf.cpp, ckpt/export_gguf.cpp, ckpt/peft.cpp).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "smelt/ckpt/export_gguf.hpp"
#include "smelt/ckpt/export_hf.hpp"
#include "smelt/ckpt/peft.hpp"
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
// --format gguf: the export, --check, the summary line and --json.
int export_gguf_main(const ExportSource& src, const std::string& output, GgufDtype dtype,
                     const std::string& tok_path, bool check, bool json) {
  const std::string& step_dir = src.step_dir;
  auto t0 = std::chrono::steady_clock::now();
  GgufExportStats st;
  if (Status s = export_gguf(src, output, dtype, tok_path, &st); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string check_result = "not run", file_type = gguf_dtype_name(dtype);
  double diff = 0, rel = 0;
  if (check) {
    if (Status s = export_gguf_check(src, output, &diff, &rel, &file_type); !s) {
      spdlog::error("--check failed: {}", s.message());
      return kExitFailure;
    }
    check_result = "passed";
  }
  std::string types;
  for (const auto& [t, n] : st.types) types += fmt::format("{}{} {}", types.empty() ? "" : ", ", n, t);
  std::fputs(fmt::format("[export] {}{} -> {}: {} tensors ({}), {:.1f} MiB GGUF, tokenizer.ggml.pre {}, {:.2f} s; "
                         "check {}{}\n",
                         step_dir, src.merge_lora ? " (LoRA merged into its base)" : "", output, st.tensors, types, st.bytes / 1048576.0, st.pre, secs, check_result,
                         check ? (diff == 0 ? " (logits identical)"
                                            : fmt::format(" (logits within {:.2e} of max(1, max|logit|))", rel))
                               : "")
                 .c_str(),
             stderr);
  if (json) {
    nlohmann::json j = {{"checkpoint", step_dir}, {"output", output}, {"format", "gguf"}, {"merge_lora", src.merge_lora},
                        {"dtype", gguf_dtype_name(dtype)}, {"tensors", st.tensors}, {"types", st.types},
                        {"f16_fallbacks", st.f16_fallbacks}, {"bytes", st.bytes},
                        {"largest_tensor_bytes", st.largest_tensor}, {"pre", st.pre}, {"seconds", secs},
                        {"check", check_result}, {"check_max_abs_diff", diff}, {"check_rel_diff", rel},
                        {"peak_rss_bytes", peak_rss_bytes()}};
    std::fputs((j.dump() + "\n").c_str(), stdout);
  }
  return kExitOk;
}

// A LoRA run's adapters in PEFT's layout.
int export_peft_main(const std::string& step_dir, const std::string& output, bool json) {
  if (Status s = peft_export(step_dir, output); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  std::fputs(fmt::format("[export] {} -> {}: adapter_config.json, adapter_model.safetensors (PEFT LoRA)\n", step_dir,
                         output).c_str(), stderr);
  if (json)
    std::fputs((nlohmann::json{{"checkpoint", step_dir}, {"output", output}, {"format", "peft"}}.dump() + "\n").c_str(),
               stdout);
  return kExitOk;
}

}  // namespace

int cli_export(int argc, char** argv) {
  CLI::App app{"smelt export: a checkpoint -> Hugging Face Llama layout (model.safetensors, config.json, "
               "tokenizer.json) or one GGUF file for llama.cpp, streamed one tensor at a time"};
  app.name("smelt export");
  std::string ckpt, format = "hf", output, tok_path, dtype_name = "f32";
  bool check = false, json = false, merge_lora = false;
  app.add_option("--checkpoint", ckpt, "step directory or run directory (its newest valid checkpoint) (required)")
      ->required();
  app.add_option("--format", format, "hf (Hugging Face LlamaForCausalLM, F32 safetensors; default), gguf "
                 "(llama.cpp's llama architecture, one file) or peft (a LoRA run's adapters: adapter_config.json + "
                 "adapter_model.safetensors)");
  app.add_option("--dtype", dtype_name, "gguf: f32 (default), bf16, f16 or q8_0 for the matrices (norms stay f32)");
  app.add_option("-o,--output", output, "hf: folder to write (created; files in it are replaced); gguf: the file "
                 "(required)")->required();
  app.add_option("--tokenizer", tok_path, "tokenizer.json to include (default: the checkpoint's copy)");
  app.add_flag("--check", check, "read the export back, run a fixed batch with both weight sets, exit 1 on any "
               "difference in the logits");
  app.add_flag("--merge-lora", merge_lora, "hf, gguf: a LoRA run's checkpoint: merge its adapters into the base it "
               "trained on (W += alpha/rank * B A) and export the whole model; --check then compares it with the base "
               "and adapters unmerged");
  app.add_flag("--json", json, "print a JSON summary on stdout");
  if (int rc = cli_parse(app, argc, argv, "export"); rc >= 0) return rc;
  if (format != "hf" && format != "gguf" && format != "peft") {
    spdlog::error("--format {}: expected hf (Hugging Face Llama safetensors + config.json), gguf or peft", format);
    return kExitUsage;
  }
  GgufDtype dtype = GgufDtype::kF32;
  if (Status s = gguf_dtype_parse(dtype_name, dtype); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  if (format == "hf" && dtype != GgufDtype::kF32) {
    spdlog::error("--dtype {}: the hf export writes F32 only; --dtype is for --format gguf", dtype_name);
    return kExitUsage;
  }
  std::string step_dir;
  if (Status s = cli_resolve_checkpoint(ckpt, step_dir); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  if (format == "peft" && merge_lora) {
    spdlog::error("--merge-lora: --format peft writes the adapters unmerged; merge with --format hf or gguf");
    return kExitUsage;
  }
  const ExportSource src(step_dir, merge_lora);
  if (format == "gguf") return export_gguf_main(src, output, dtype, tok_path, check, json);
  if (format == "peft") return export_peft_main(step_dir, output, json);
  auto t0 = std::chrono::steady_clock::now();
  HfExportStats st;
  if (Status s = export_hf(src, output, tok_path, &st); !s) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string check_result = "not run";
  double diff = 0;
  if (check) {
    if (Status s = export_hf_check(src, output, &diff); !s) {
      spdlog::error("--check failed: {}", s.message());
      return kExitFailure;
    }
    check_result = "passed";
  }
  std::fputs(fmt::format("[export] {}{} -> {}: {} tensors, {:.1f} MiB model.safetensors (largest tensor {:.1f} MiB), "
                         "config.json{}, {:.2f} s; check {}{}\n",
                         step_dir, merge_lora ? " (LoRA merged into its base)" : "", output, st.tensors, st.bytes / 1048576.0, st.largest_tensor / 1048576.0,
                         st.tokenizer ? ", tokenizer.json" : " (no tokenizer)", secs, check_result,
                         !check ? "" : merge_lora ? fmt::format(" (logits within {:.2e} of the unmerged model's)", diff)
                                                  : std::string(" (logits identical)"))
                 .c_str(),
             stderr);
  if (json) {
    nlohmann::json j = {{"checkpoint", step_dir}, {"output", output}, {"format", format}, {"merge_lora", merge_lora},
                        {"tensors", st.tensors}, {"bytes", st.bytes}, {"largest_tensor_bytes", st.largest_tensor},
                        {"tokenizer", st.tokenizer}, {"seconds", secs}, {"check", check_result},
                        {"check_max_abs_diff", diff}, {"peak_rss_bytes", peak_rss_bytes()}};
    std::fputs((j.dump() + "\n").c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace smelt
