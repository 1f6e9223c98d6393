// Logging: one stderr logger for every stage, "[stage] message" lines. Thin layer over spdlog so
// the format is set in one place. Not for metrics (those are JSON files).
#pragma once
#include <string_view>

#include <spdlog/spdlog.h>

namespace smelt {

// Sets the global logger's prefix ("prep") and level ("info", "warn", "debug"...).
void log_setup(std::string_view stage, std::string_view level = "info");

}  // namespace smelt
