// The shared HTTP listener (http_listener.hpp) over Debian's cpp-httplib, and the self-pipe that
// turns SIGINT/SIGTERM into a call on a thread of ours. Not the routes.
#include "smelt/common/http_listener.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <httplib.h>

#include "smelt/common/stop_signals.hpp"

namespace smelt {

HttpListener::HttpListener(const HttpListenerConfig& c) : cfg_(c), svr_(std::make_unique<httplib::Server>()) {
  const size_t threads = (size_t)std::max(2, cfg_.threads);
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr_->set_payload_max_length(cfg_.max_body_bytes);
  svr_->set_read_timeout(cfg_.read_timeout_s, 0);
  svr_->set_write_timeout(cfg_.write_timeout_s, 0);
  svr_->set_keep_alive_timeout(cfg_.keep_alive_s);
  svr_->set_tcp_nodelay(cfg_.tcp_nodelay);
  // httplib's default also sets SO_REUSEPORT, which lets a second server bind the same port and
  // take half the connections; keep SO_REUSEADDR only (a restart may rebind over TIME_WAIT)
  svr_->set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = sock;  // the last socket made is the one that binds (bind() raises its backlog)
  });
}

HttpListener::~HttpListener() {
  if (listener_.joinable()) {
    stop();
    listener_.join();
  }
}

Status HttpListener::bind(const std::string& hint) {
  if (cfg_.port == 0) {
    port_ = svr_->bind_to_any_port(cfg_.host);
    if (port_ <= 0) return Status::error(fmt::format("--host {}: cannot bind any port ({})", cfg_.host, std::strerror(errno)));
  } else {
    if (!svr_->bind_to_port(cfg_.host, cfg_.port))
      return Status::error(fmt::format("--host {} --port {}: cannot bind ({}); is another server on that port?{}",
                                       cfg_.host, cfg_.port, std::strerror(errno), hint.empty() ? "" : " " + hint));
    port_ = cfg_.port;
  }
  // Debian's cpp-httplib is a compiled library that listens with a backlog of 5: 16 clients
  // connecting at once overflowed it, and the dropped SYNs came back after the kernel's 1 s
  // retransmission (a 1 s connect, seen as the time to first token at P99). listen() again on the
  // bound socket sets a deeper queue (the kernel caps it at net.core.somaxconn).
  if (listen_fd_ >= 0) ::listen(listen_fd_, kListenBacklog);
  return Status::ok();
}

void HttpListener::fallback(const std::function<void(const httplib::Request&, httplib::Response&)>& handler) {
  svr_->Get(".*", handler);
  svr_->Post(".*", handler);
  svr_->Put(".*", handler);
  svr_->Patch(".*", handler);
  svr_->Delete(".*", handler);
  svr_->Options(".*", handler);
}

void HttpListener::start() {
  listener_ = std::thread([this] {
    listen_ok_ = svr_->listen_after_bind();
    listener_done_ = true;
  });
}

void HttpListener::stop() {
  // httplib's stop() does nothing until the listener is inside its accept loop (a stop right after
  // start() left it blocked in accept for ever): wait for the loop, or for the listener's end.
  if (listener_.joinable())
    for (int i = 0; i < 10000 && !svr_->is_running() && !listener_done_; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  svr_->stop();
}

std::string http_exception_text(std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  return "unknown exception";
}

bool HttpListener::join() {
  if (listener_.joinable()) listener_.join();
  return listen_ok_;
}

namespace {
std::atomic<int> g_stop_pipe_write{-1};  // the open HttpSignalWatch's pipe (-1: none)

void on_stop_signal() {  // async-signal-safe (it may run in a handler): one byte into the pipe
  const int saved = errno;
  const char b = 's';
  [[maybe_unused]] ssize_t n = write(g_stop_pipe_write.load(), &b, 1);
  errno = saved;
}
}  // namespace

HttpSignalWatch::HttpSignalWatch() = default;

Status HttpSignalWatch::open() {
  if (pipe(pipe_) != 0) return Status::error(fmt::format("pipe: {}", std::strerror(errno)));
  g_stop_pipe_write = pipe_[1];
  signal(SIGPIPE, SIG_IGN);
  signals_ = std::make_unique<StopSignals>(on_stop_signal);
  return Status::ok();
}

void HttpSignalWatch::watch(std::function<void()> on_signal) {
  reader_ = std::thread([this, on_signal = std::move(on_signal)] {
    char b = 0;
    while (true) {
      pollfd p{pipe_[0], POLLIN, 0};
      if (poll(&p, 1, -1) < 0 && errno == EINTR) continue;
      if (read(pipe_[0], &b, 1) != 1) continue;
      if (b == 's') on_signal();
      return;  // 's' handled, or end()'s 'q'
    }
  });
}

void HttpSignalWatch::end() {
  if (!reader_.joinable()) return;
  const char q = 'q';
  [[maybe_unused]] ssize_t n = write(pipe_[1], &q, 1);
  reader_.join();
}

HttpSignalWatch::~HttpSignalWatch() {
  end();
  signals_.reset();
  if (pipe_[0] < 0) return;
  g_stop_pipe_write = -1;  // the handler stays installed; from now on its write fails harmlessly
  close(pipe_[0]);
  close(pipe_[1]);
}

}  // namespace smelt
