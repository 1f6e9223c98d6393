// The HTTP side of `smelt serve` (docs/serve.md): cpp-httplib routes over the engine: /health,
// /v1/models, /v1/completions, /v1/chat/completions (JSON or server-sent events), /tokenize,
// /detokenize, /metrics; OpenAI error objects for every 4xx/5xx, a body limit, timeouts, an
// optional API key, and a graceful stop that ends the streams in flight before the listener closes.
// cpp-httplib runs one thread per connection from a fixed pool; a streaming response holds its
// thread until the stream ends. Not the JSON (openai_api.hpp), not scheduling (engine.hpp), not
// flags or signals (cli/serve_cmd.cpp).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "smelt/common/http_listener.hpp"
#include "smelt/common/status.hpp"
#include "smelt/serve/chat_template.hpp"
#include "smelt/serve/engine.hpp"
#include "smelt/serve/metrics.hpp"
#include "smelt/serve/openai_api.hpp"

namespace smelt {

// The listener's settings (serve_cmd: threads = slots + max_queue + 4; TCP_NODELAY on, so that one
// SSE chunk per token goes out at once) and the server's own.
struct HttpConfig : HttpListenerConfig {
  HttpConfig() {
    port = 8000;
    tcp_nodelay = true;
  }
  std::string api_key;             // "": no key; else every route but /health wants "Bearer KEY"
  int retry_after_s = 1;           // Retry-After of a 429
};

class HttpServer {
 public:
  explicit HttpServer(HttpConfig c);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the socket (errors name host and port).
  Status bind();
  int port() const { return http_.port(); }
  // Serves on a thread of its own; until ready(), /health and the model routes answer 503.
  void start();
  // The model is loaded: route requests to the engine (borrowed; it must outlive join()).
  // False when a stop already began (the caller then shuts the engine down itself).
  // own: the model's own chat template (chat_template_from_state); null: the tokenizer's format.
  bool ready(Engine* engine, const std::string& model_name, const ChatTemplate* own = nullptr);
  // Graceful stop, from any thread but a signal handler: new completions get 503, the engine ends
  // what is in flight (finished within grace_seconds, else "aborted"), the streams write their last
  // chunk and [DONE], then the listener closes. Idempotent; returns once the listener is told to stop.
  void shutdown(double grace_seconds);
  // Waits for the listener thread (and every connection thread) to end. True when it ended by
  // shutdown(), false when listening failed.
  bool join();
  bool stopping() const { return stopping_.load(); }

 private:
  struct Job;
  using Req = httplib::Request;
  using Res = httplib::Response;
  void routes();
  bool authorized(const Req& q, Res& s) const;
  void completion(ApiRoute route, const Req& q, Res& s);
  void attach(const std::shared_ptr<Job>& job, size_t i, GenRequest& gen, int32_t eod);
  void refused(Admission a, const std::string& why, const ApiRequest& req, int which, Res& s);
  void stream(std::shared_ptr<Job> job, Res& s);
  void tokenize(const Req& q, Res& s);
  void detokenize(const Req& q, Res& s);
  void models(const Req& q, Res& s);
  bool unavailable(Res& s) const;  // 503 while loading or stopping
  void request_ended();

  HttpConfig cfg_;
  HttpListener http_;
  std::atomic<Engine*> engine_{nullptr};
  std::atomic<bool> stopping_{false};
  std::string model_name_;
  ApiContext api_;
  ChatTemplate tmpl_;
  int64_t created_ = 0;
  ServeCounters counters_;
  std::mutex mu_;  // guards in_flight_, ready()/shutdown() hand-over
  std::condition_variable idle_;
  int in_flight_ = 0;  // completion requests accepted by the engine and not yet answered
  bool shut_ = false;
};

}  // namespace smelt
