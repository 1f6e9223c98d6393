// Subcommand entry points: each parses its own flags and returns an exit code (0, 1 failure, 2 usage).
#pragma once

namespace smelt {

int cli_prep(int argc, char** argv);
int cli_tokenizer(int argc, char** argv);        // dispatches train | encode | decode
int cli_tokenizer_train(int argc, char** argv);  // `smelt tokenizer train ...` (argv[0] = "train")
int cli_tokenize(int argc, char** argv);

}  // namespace smelt
