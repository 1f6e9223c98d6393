// Replacing the light `smelt` process with `smelt-full` (the file beside it), argv unchanged: for
// the commands the light binary does not link (command_table.hpp), and for a light command whose
// config asks for a part only the full binary has (prep with a reference model).
#pragma once

namespace smelt {

// Returns only on failure (a message on stderr, kExitFailure).
int exec_full_binary(int argc, char** argv);

}  // namespace smelt
