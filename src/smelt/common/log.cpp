// stderr logger shared by all stages.
#include "smelt/common/log.hpp"

#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace smelt {

void log_setup(std::string_view stage, std::string_view level) {
  auto logger = spdlog::stderr_color_mt(std::string(stage));
  logger->set_pattern(fmt::format("[{}] %^%v%$", stage));
  logger->set_level(spdlog::level::from_str(std::string(level)));
  spdlog::set_default_logger(logger);
}

}  // namespace smelt
