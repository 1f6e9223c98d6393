// --checkpoint DIR for the commands that read a model (generate, export): DIR is a step directory
// (holds manifest.json) or a run directory (then its newest valid checkpoint). Defined in
// generate_cmd.cpp. Not checkpoint io (ckpt/checkpoint.hpp).
#pragma once
#include <string>

#include "smelt/common/status.hpp"

namespace smelt {

Status cli_resolve_checkpoint(const std::string& dir, std::string& step_dir);

}  // namespace smelt
