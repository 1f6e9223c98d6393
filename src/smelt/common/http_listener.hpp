// One cpp-httplib server's socket and listener thread, as Smelt's servers (`smelt serve`,
// `smelt dashboard`) share them: SO_REUSEADDR without SO_REUSEPORT, a deep accept queue, binding
// errors that name --host and --port, a listener thread, a stop that is not lost when it comes
// right after start(), and SIGINT/SIGTERM turned into a call on a thread of ours (HttpSignalWatch).
// Not the routes: each server adds its own to server().
#pragma once
#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "smelt/common/status.hpp"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace smelt {

class StopSignals;

// The settings every server has; a server's own config derives from it (and sets its defaults).
struct HttpListenerConfig {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  int port = 0;                    // 0: any free port (port() says which)
  int threads = 8;                 // connection threads (a connection holds one while it is open)
  size_t max_body_bytes = 1 << 20; // larger request bodies: 413
  int read_timeout_s = 30;         // a request's headers and body must arrive within this
  int write_timeout_s = 30;        // a client that reads nothing for this long is dropped
  int keep_alive_s = 5;            // an idle kept-alive connection holds its thread this long
  bool tcp_nodelay = false;        // true: small writes (one SSE chunk per token) go out at once
};

// What a route's exception says, for the 500 answer and the log ("unknown exception" when it is
// not a std::exception).
std::string http_exception_text(std::exception_ptr ep);

class HttpListener {
 public:
  explicit HttpListener(const HttpListenerConfig& c);
  ~HttpListener();  // stops and joins a listener still running
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  httplib::Server& server() { return *svr_; }
  // Routes every method httplib knows (GET, POST, PUT, PATCH, DELETE, OPTIONS) that no route took
  // to `handler` (the server's 404 / 405); register it after the routes.
  void fallback(const std::function<void(const httplib::Request&, httplib::Response&)>& handler);
  // Binds the socket; `hint` is added to the message when the port is taken.
  Status bind(const std::string& hint = "");
  int port() const { return port_; }
  // Accepts connections on a thread of its own.
  void start();
  // Tells the listener to stop (from any thread but a signal handler); connections in flight end
  // with their requests. Idempotent.
  void stop();
  // Waits for the listener and every connection thread. True when it ended by stop(), false when
  // listening failed.
  bool join();

 private:
  HttpListenerConfig cfg_;
  std::unique_ptr<httplib::Server> svr_;
  int port_ = 0;
  std::thread listener_;
  bool listen_ok_ = true;
  std::atomic<bool> listener_done_{false};  // the listener thread has returned
  int listen_fd_ = -1;                        // the listening socket (its backlog is raised in bind())
  static constexpr int kListenBacklog = 512;
};

// SIGINT/SIGTERM for a server's command, handled on a thread of ours that may do anything (log,
// a graceful stop): StopSignals (stop_signals.hpp) blocks them in every thread started after
// open(), and its handler writes one byte to a self-pipe that watch()'s thread reads. One per
// process at a time; declare it before the server, so that it outlives it.
class HttpSignalWatch {
 public:
  HttpSignalWatch();
  ~HttpSignalWatch();  // end(), then the signals' mask restored and the pipe closed
  HttpSignalWatch(const HttpSignalWatch&) = delete;
  HttpSignalWatch& operator=(const HttpSignalWatch&) = delete;

  // Makes the pipe, ignores SIGPIPE (a client gone mid-write is an error return, not the end of
  // the server) and starts taking the signals: call it before the server starts any thread.
  Status open();
  // Reads the pipe on a thread of its own: a signal (also one that came before) calls on_signal
  // there, once, and ends the thread.
  void watch(std::function<void()> on_signal);
  // Ends the reading thread (on_signal is not called unless a signal came first) and joins it.
  // Idempotent.
  void end();

 private:
  int pipe_[2] = {-1, -1};
  std::unique_ptr<StopSignals> signals_;
  std::thread reader_;
};

}  // namespace smelt
