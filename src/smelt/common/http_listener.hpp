// One cpp-httplib server's socket and listener thread, as Smelt's servers (`smelt serve`,
// `smelt dashboard`) share them: SO_REUSEADDR without SO_REUSEPORT, a deep accept queue, binding
// errors that name --host and --port, a listener thread, and a stop that is not lost when it comes
// right after start(). Not the routes: each server adds its own to server().
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

}  // namespace smelt
