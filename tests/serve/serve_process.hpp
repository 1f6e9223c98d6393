// Test helper: a `smelt serve` (or `smelt dashboard`) child process on a free port (--port 0), its
// port read from the "listening on" line, stopped by a signal or killed when it goes out of scope.
// Not a client.
#pragma once
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

namespace smelt::test {

class ServeProcess {
 public:
  // Starts `smelt COMMAND --port 0 ARGS` and waits for its "listening on" line.
  ServeProcess(const std::string& args, const std::filesystem::path& log, const std::string& command = "serve")
      : log_(log) {
    int p[2];
    if (pipe(p) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(p[1], 1);
      FILE* err = std::fopen(log.c_str(), "w");
      if (err) dup2(fileno(err), 2);
      close(p[0]);
      std::string cmd = std::string("exec ") + SMELT_BINARY + " " + command + " --port 0 " + args;
      execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
      _exit(127);
    }
    close(p[1]);
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::smatch m;
    const std::regex re("listening on http://127\\.0\\.0\\.1:([0-9]+)\n");
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd pf{p[0], POLLIN, 0};
      if (poll(&pf, 1, 1000) <= 0) continue;
      char buf[256];
      ssize_t n = read(p[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, (size_t)n);
      if (std::regex_search(out, m, re)) {
        port_ = std::stoi(m[1]);
        break;
      }
    }
    close(p[0]);
  }
  ~ServeProcess() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Sends sig and returns the exit status (-1: killed by a signal / timed out).
  int stop(int sig = SIGTERM, int timeout_s = 60) {
    kill(pid_, sig);
    for (int i = 0; i < timeout_s * 20; i++) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  std::string log() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool reaped_ = false;
};

}  // namespace smelt::test
