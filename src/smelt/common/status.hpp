// Status: what library code returns instead of throwing or exiting.
// The CLI turns a failed Status into a message and an exit code; library code never exits.
#pragma once
#include <string>
#include <utility>

namespace smelt {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { Status s; s.ok_ = false; s.message_ = std::move(message); return s; }
  bool is_ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const std::string& message() const { return message_; }

 private:
  bool ok_ = true;
  std::string message_;
};

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

}  // namespace smelt
