// Subcommand entry points: each parses its own flags and returns an exit code (0, 1 failure, 2 usage).
#pragma once

namespace smelt {

int cli_prep(int argc, char** argv);
int cli_tokenizer(int argc, char** argv);        // dispatches train | encode | decode
int cli_tokenizer_train(int argc, char** argv);  // `smelt tokenizer train ...` (argv[0] = "train")
int cli_tokenize(int argc, char** argv);
int cli_dedup(int argc, char** argv);    // dedup_cmd.cpp: run | signatures | buckets | cluster | filter
int cli_quality(int argc, char** argv);   // quality_cmd.cpp: train | eval
int cli_train(int argc, char** argv);     // train_cmd.cpp
int cli_eval(int argc, char** argv);      // eval_cmd.cpp
int cli_generate(int argc, char** argv);  // generate_cmd.cpp
int cli_ckpt(int argc, char** argv);      // ckpt_cmd.cpp: verify | list
int cli_export(int argc, char** argv);    // export_cmd.cpp
int cli_import(int argc, char** argv);    // import_cmd.cpp
int cli_pipeline(int argc, char** argv);  // pipeline_cmd.cpp
int cli_machine(int argc, char** argv);   // machine_cmd.cpp
int cli_plan(int argc, char** argv);      // plan_cmd.cpp
int cli_serve(int argc, char** argv);     // serve_cmd.cpp
int cli_launch(int argc, char** argv);    // launch_cmd.cpp
int cli_health(int argc, char** argv);    // health_cmd.cpp
int cli_dashboard(int argc, char** argv); // dashboard_cmd.cpp
int cli_report(int argc, char** argv);    // dashboard_cmd.cpp
int cli_trace(int argc, char** argv);     // trace_cmd.cpp: merge | summary

// `smelt --version`: the project's version and the source commit (build/generated/version.cpp).
const char* cli_version();
const char* cli_source_commit();

}  // namespace smelt
