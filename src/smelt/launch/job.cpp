// A supervised job's process group: start, stderr relay, stop. Not the restart policy.
#include "smelt/launch/job.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "smelt/common/clock.hpp"

namespace smelt {

namespace {
constexpr size_t kTailBytes = 256 << 10;

// Every process below this one now (from /proc: each process's parent).
std::vector<pid_t> descendants() {
  std::multimap<pid_t, pid_t> children;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string stat;
    std::getline(f, stat);
    const size_t close = stat.rfind(')');  // "pid (comm) state ppid ..."
    if (close == std::string::npos || close + 4 >= stat.size()) continue;
    children.emplace((pid_t)std::atoi(stat.c_str() + close + 4), (pid_t)std::atoi(name.c_str()));
  }
  std::vector<pid_t> out, todo = {::getpid()};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (auto [it, end] = children.equal_range(p); it != end; ++it) out.push_back(it->second), todo.push_back(it->second);
  }
  return out;
}

// Reaps the ended children that are not the job's leader (orphans adopted).
void reap_orphans(pid_t leader) {
  for (const pid_t p : descendants()) {
    int st = 0;
    if (p != leader) ::waitpid(p, &st, WNOHANG);
  }
}

}  // namespace

void job_adopt_orphans() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int run_capture(const std::string& shell_cmd, std::string& out) {
  out.clear();
  std::FILE* p = ::popen(shell_cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  return ::pclose(p);
}

Job::~Job() {
  if (running()) stop(5);
  if (err_fd_ >= 0) ::close(err_fd_);
}

Status Job::start(const std::vector<std::string>& argv, std::FILE* log, bool echo) {
  if (argv.empty()) return Status::error("no command to launch");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::error(fmt::format("pipe: {}", std::strerror(errno)));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]), ::close(fds[1]);
    return Status::error(fmt::format("fork: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // the job's own group: a stop reaches mpirun and every rank it started here
    sigset_t none;    // the supervisor takes SIGINT/SIGTERM on a thread of its own (blocked here)
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(fds[1], STDERR_FILENO);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "smelt launch: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from this side, so a stop right after the fork finds the group
  ::close(fds[1]);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  pid_ = pid, err_fd_ = fds[0], ended_ = false, exit_code_ = -1, term_signal_ = 0, log_ = log, echo_ = echo;
  tail_.clear();
  return Status::ok();
}

void Job::read_available() {
  if (err_fd_ < 0) return;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(err_fd_, buf, sizeof buf);
    if (n > 0) {
      if (echo_) (void)!::write(STDERR_FILENO, buf, (size_t)n);
      if (log_) std::fwrite(buf, 1, (size_t)n, log_), std::fflush(log_);
      tail_.append(buf, (size_t)n);
      if (tail_.size() > 2 * kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
      continue;
    }
    if (n == 0) {  // every writer closed it
      ::close(err_fd_);
      err_fd_ = -1;
    }
    return;
  }
}

void Job::reap(int status) {
  ended_ = true;
  if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status), term_signal_ = 0;
  else if (WIFSIGNALED(status)) exit_code_ = -1, term_signal_ = WTERMSIG(status);
}

bool Job::poll(int wait_ms) {
  if (ended_) return false;
  if (err_fd_ >= 0) {
    pollfd p{err_fd_, POLLIN, 0};
    ::poll(&p, 1, wait_ms);
  } else if (wait_ms > 0) {
    ::usleep((useconds_t)wait_ms * 1000);
  }
  read_available();
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    reap(status);
    read_available();
    return false;
  }
  return true;
}

void Job::stop(double grace_s) {
  if (pid_ <= 0) return;
  // The group outlives its leader when a rank is stopped or slow to die: signal it either way, and
  // every process below this one (ranks and daemons in groups of their own) is woken and, after the
  // grace, killed. SIGTERM goes to the group only: mpirun passes it on to each rank once (a second
  // one would end a rank before its save).
  const auto signal_all = [this](int sig) {
    ::kill(-pid_, sig);
    for (const pid_t p : descendants()) ::kill(p, sig);
  };
  signal_all(SIGCONT);
  ::kill(-pid_, SIGTERM);
  const double until = now_s() + grace_s;
  while (!ended_ && now_s() < until) poll(50);
  signal_all(SIGKILL);
  if (!ended_) {
    int status = 0;
    if (::waitpid(pid_, &status, 0) == pid_) reap(status);
  }
  for (int i = 0; i < 40 && !descendants().empty(); i++) {  // the adopted ones, killed above
    reap_orphans(pid_);
    if (!descendants().empty()) ::usleep(50 * 1000);
  }
  for (int i = 0; i < 20 && err_fd_ >= 0; i++) poll(50);  // what the group wrote while dying
}

}  // namespace smelt
