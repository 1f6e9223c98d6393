// Subcommand entry points: each parses its own flags and returns an exit code (0, 1 failure, 2 usage).
#pragma once

namespace smelt {

int cli_prep(int argc, char** argv);

}  // namespace smelt
