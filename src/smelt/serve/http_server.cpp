// The HTTP routes of `smelt serve` over cpp-httplib (http_server.hpp). A completion is submitted
// to the engine from the connection's thread; the engine's callbacks (its scheduler thread) only
// push into the request's Job under a mutex and notify, never block; the connection thread either
// waits for the end (JSON) or writes each token as an SSE chunk as it arrives (stream). A chunk
// that cannot be written means the client is gone: the Job is marked cancelled and the next
// on_token returns false, which frees the slot.
#include "smelt/serve/http_server.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>

#include <fmt/format.h>
#include <httplib.h>

#include "smelt/common/log.hpp"

namespace smelt {

using json = nlohmann::json;

// One completion request as the engine's callbacks and the connection thread share it: one
// engine request per prompt (a list gives several; a stream has one).
struct HttpServer::Job {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<TokenEvent> pending;  // stream: events not yet written
  std::vector<ApiChoice> choices;  // [prompt] its ids, every event it handed out, its result
  int running = 0;                 // prompts whose on_done has not run
  bool done = false;               // every prompt's on_done has run
  std::atomic<bool> cancelled{false};
  ApiRequest req;
  ApiMeta meta;
};

namespace {

constexpr const char* kJson = "application/json";

void send_json(httplib::Response& s, int status, const json& j) {
  s.status = status;
  s.set_content(api_dump(j), kJson);
}

void send_error(httplib::Response& s, const ApiError& e) { send_json(s, e.status, api_error_body(e)); }

ApiError error_of(int status, std::string message, std::string type, std::string code, std::string param = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

// Equal strings in time that depends only on their lengths (no early exit on the first
// difference, so the key cannot be found byte by byte from response times).
bool equal_constant_time(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; i++) {
    unsigned char x = i < a.size() ? (unsigned char)a[i] : 0, y = i < b.size() ? (unsigned char)b[i] : 0;
    diff = diff | (unsigned char)(x ^ y);
  }
  return diff == 0;
}

// The routes and the methods each takes (405 lists them in Allow).
struct RouteSpec {
  const char* path;
  const char* allow;
};
constexpr RouteSpec kRoutes[] = {{"/health", "GET, HEAD"},           {"/v1/models", "GET, HEAD"},
                                 {"/metrics", "GET, HEAD"},          {"/v1/completions", "POST"},
                                 {"/v1/chat/completions", "POST"},   {"/tokenize", "POST"},
                                 {"/detokenize", "POST"}};

const char* allowed_methods(const std::string& path) {
  for (const auto& r : kRoutes)
    if (path == r.path) return r.allow;
  if (path.rfind("/v1/models/", 0) == 0 && path.size() > 11) return "GET, HEAD";
  return nullptr;
}

}  // namespace

HttpServer::HttpServer(HttpConfig c) : cfg_(std::move(c)), http_(cfg_) {
  created_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  routes();
}

// The listener's threads run the routes, which use the members after http_: end them first.
HttpServer::~HttpServer() {
  http_.stop();
  http_.join();
}

Status HttpServer::bind() { return http_.bind(); }

void HttpServer::start() { http_.start(); }

bool HttpServer::ready(Engine* engine, const std::string& model_name, const ChatTemplate* own) {
  std::lock_guard<std::mutex> lk(mu_);
  if (shut_) return false;
  model_name_ = model_name;
  api_.model_name = model_name;
  api_.ctx = engine->ctx() > 0 ? engine->ctx() : engine->model().max_seq_len;
  api_.vocab_size = engine->model().vocab_size;
  // a prompt list is admitted whole: more than the slots and the queue hold could never run
  api_.max_prompts = std::min(kApiMaxPrompts, engine->config().slots + engine->config().max_queue);
  tmpl_ = own ? *own : chat_template_for(engine->tokenizer());
  engine_.store(engine);
  return true;
}

void HttpServer::shutdown(double grace_seconds) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (shut_) return;
    shut_ = true;
  }
  stopping_ = true;
  if (Engine* e = engine_.load()) {
    spdlog::info("stopping: finishing the requests in flight (at most {} s)", grace_seconds);
    e->shutdown(grace_seconds);  // every accepted request's on_done has run when this returns
    // the connection threads now write the last chunks and answers; a client that reads nothing
    // is dropped by the write timeout
    std::unique_lock<std::mutex> lk(mu_);
    idle_.wait_for(lk, std::chrono::seconds(cfg_.write_timeout_s + 1), [&] { return in_flight_ == 0; });
  }
  http_.stop();
}

bool HttpServer::join() { return http_.join(); }

void HttpServer::request_ended() {
  std::lock_guard<std::mutex> lk(mu_);
  in_flight_--;
  idle_.notify_all();
}

bool HttpServer::unavailable(Res& s) const {
  if (stopping_) {
    send_error(s, error_of(503, "the server is shutting down", "unavailable_error", "shutting_down"));
    return true;
  }
  if (!engine_.load()) {
    send_error(s, error_of(503, "the model is loading", "unavailable_error", "loading"));
    s.set_header("Retry-After", "1");
    return true;
  }
  return false;
}

bool HttpServer::authorized(const Req& q, Res& s) const {
  if (cfg_.api_key.empty()) return true;
  const std::string h = q.get_header_value("Authorization");
  const std::string kScheme = "Bearer ";
  if (h.size() > kScheme.size() && strncasecmp(h.c_str(), kScheme.c_str(), kScheme.size()) == 0 &&
      equal_constant_time(h.substr(kScheme.size()), cfg_.api_key))
    return true;
  send_error(s, error_of(401, h.empty() ? "no API key: send the header 'Authorization: Bearer KEY'"
                                        : "incorrect API key in the Authorization header",
                         "invalid_request_error", "invalid_api_key"));
  s.set_header("WWW-Authenticate", "Bearer");
  return false;
}

void HttpServer::routes() {
  auto& svr = http_.server();
  // auth first, then the handler
  auto guard = [this](void (HttpServer::*fn)(const Req&, Res&)) {
    return [this, fn](const Req& q, Res& s) {
      if (authorized(q, s)) (this->*fn)(q, s);
    };
  };
  svr.Get("/health", [this](const Req&, Res& s) {
    if (!unavailable(s)) send_json(s, 200, {{"status", "ok"}});
  });
  svr.Get("/v1/models", guard(&HttpServer::models));
  svr.Get("/v1/models/(.+)", guard(&HttpServer::models));
  svr.Get("/metrics", [this](const Req& q, Res& s) {
    if (!authorized(q, s)) return;
    Engine* e = engine_.load();
    s.status = 200;
    s.set_content(metrics_render(e ? e->stats() : EngineStats{}, counters_.snapshot()),
                  "text/plain; version=0.0.4; charset=utf-8");
  });
  svr.Post("/v1/completions", [this](const Req& q, Res& s) {
    if (authorized(q, s)) completion(ApiRoute::kCompletions, q, s);
  });
  svr.Post("/v1/chat/completions", [this](const Req& q, Res& s) {
    if (authorized(q, s)) completion(ApiRoute::kChat, q, s);
  });
  svr.Post("/tokenize", guard(&HttpServer::tokenize));
  svr.Post("/detokenize", guard(&HttpServer::detokenize));

  // Anything else: 405 on a known path (with Allow), else 404. Registered last, for every method
  // httplib routes (others, e.g. TRACE, get its own 400), after the body was read, so a kept-alive
  // connection never sees an unread body as the next request.
  auto fallback = [this](const Req& q, Res& s) {
    if (const char* allow = allowed_methods(q.path)) {
      send_error(s, error_of(405, fmt::format("{} does not take {}; it takes {}", q.path, q.method, allow),
                             "invalid_request_error", "method_not_allowed"));
      s.set_header("Allow", allow);
    } else {
      send_error(s, error_of(404, fmt::format("no route {} {} (see docs/serve.md for the routes)", q.method, q.path),
                             "invalid_request_error", "not_found"));
    }
  };
  http_.fallback(fallback);

  // httplib's own refusals (bad request line 400, body over the limit 413, ...) come with no body:
  // give them an OpenAI error object too.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([](const Req&, Res& s) {
    if (!s.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = s.status == 413   ? "the request body is larger than the limit (--max-body-bytes)"
                      : s.status == 414 ? "the request line is too long"
                      : s.status == 400 ? "malformed HTTP request (or a method no route takes)"
                                        : fmt::format("HTTP status {}", s.status);
    send_error(s, error_of(s.status, msg, s.status >= 500 ? "server_error" : "invalid_request_error",
                           s.status == 413 ? "payload_too_large" : std::to_string(s.status)));
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const Req& q, Res& s, std::exception_ptr ep) {
    const std::string what = http_exception_text(ep);
    spdlog::error("{} {}: {}", q.method, q.path, what);
    send_error(s, error_of(500, "internal error: " + what, "server_error", "internal_error"));
  });
  svr.set_logger([this](const Req& q, const Res& s) {
    counters_.response(s.status);
    spdlog::debug("{} {} -> {}", q.method, q.path, s.status);
  });
}

void HttpServer::models(const Req& q, Res& s) {
  if (unavailable(s)) return;
  json m = {{"id", model_name_}, {"object", "model"}, {"created", created_}, {"owned_by", "smelt"},
            {"max_model_len", api_.ctx}};
  if (q.matches.size() > 1) {
    if (q.matches[1] != model_name_) {
      send_error(s, error_of(404, fmt::format("The model '{}' does not exist; this server serves '{}'",
                                              q.matches[1].str(), model_name_),
                             "invalid_request_error", "model_not_found", "model"));
      return;
    }
    send_json(s, 200, m);
    return;
  }
  send_json(s, 200, {{"object", "list"}, {"data", json::array({m})}});
}

void HttpServer::tokenize(const Req& q, Res& s) {
  if (unavailable(s)) return;
  std::string content;
  bool pieces = false;
  ApiError err;
  if (!api_parse_tokenize(q.body, content, pieces, err)) return send_error(s, err);
  const Tokenizer& tok = engine_.load()->tokenizer();
  std::vector<uint32_t> ids;
  tok.encode(content, ids, /*allow_special=*/true);  // as completion prompts are read
  json tokens = json::array();
  for (uint32_t id : ids) {
    if (pieces)
      tokens.push_back({{"id", id}, {"piece", api_token_text(tok, (int32_t)id)}});
    else
      tokens.push_back(id);
  }
  send_json(s, 200, {{"tokens", tokens}});
}

void HttpServer::detokenize(const Req& q, Res& s) {
  if (unavailable(s)) return;
  std::vector<int32_t> ids;
  ApiError err;
  if (!api_parse_detokenize(q.body, api_.vocab_size, ids, err)) return send_error(s, err);
  const Tokenizer& tok = engine_.load()->tokenizer();
  std::vector<uint32_t> u(ids.begin(), ids.end());
  std::string text;
  tok.decode(u.data(), u.size(), text);
  send_json(s, 200, {{"content", text}});
}

// Prompt i's callbacks, on the engine's scheduler thread: push and notify only. The engine hands
// the end-of-document token that stops a request to on_token too (with the text it held back), but
// it is not a completion token (not in ids or completion_tokens): it is left out here, and its
// text reaches the client from GenResult.text with the last chunk.
void HttpServer::attach(const std::shared_ptr<Job>& job, size_t i, GenRequest& gen, int32_t eod) {
  std::weak_ptr<Job> weak = job;
  const int32_t stop_id = gen.ignore_eos ? -1 : eod;
  gen.on_token = [weak, i, stop_id](const TokenEvent& ev) {
    auto j = weak.lock();
    if (!j || j->cancelled.load()) return false;
    if (ev.id == stop_id) return true;
    std::lock_guard<std::mutex> lk(j->mu);
    if (j->req.stream) j->pending.push_back(ev);
    j->choices[i].events.push_back(ev);
    j->cv.notify_all();
    return true;
  };
  gen.on_done = [weak, i, this](const GenResult& r) {
    counters_.finished(r.finish);
    auto j = weak.lock();
    if (!j) return;
    std::lock_guard<std::mutex> lk(j->mu);
    j->choices[i].result = r;
    j->done = --j->running == 0;
    j->cv.notify_all();
  };
}

// The answer to a request the engine refused; which: the refused prompt of a list (-1: none).
void HttpServer::refused(Admission a, const std::string& why, const ApiRequest& req, int which, Res& s) {
  counters_.rejected(a);
  const char* param = req.route == ApiRoute::kChat ? "messages" : "prompt";
  const std::string msg = req.prompt_is_list && which >= 0 ? fmt::format("prompt[{}]: {}", which, why) : why;
  switch (a) {
    case Admission::kQueueFull:
      send_error(s, error_of(429, why.empty() ? "every slot is busy and the queue is full; retry later" : why,
                             "rate_limit_error", "queue_full"));
      s.set_header("Retry-After", std::to_string(cfg_.retry_after_s));
      return;
    case Admission::kTooLong:
      return send_error(s, error_of(400, msg, "invalid_request_error", "context_length_exceeded", param));
    case Admission::kStopping:
      return send_error(s, error_of(503, "the server is shutting down", "unavailable_error", "shutting_down"));
    default:
      return send_error(s, error_of(400, msg, "invalid_request_error", "invalid_value"));
  }
}

void HttpServer::completion(ApiRoute route, const Req& q, Res& s) {
  if (unavailable(s)) return;
  Engine* engine = engine_.load();
  auto job = std::make_shared<Job>();
  ApiError err;
  if (!api_parse_request(route, q.body, api_, job->req, err)) return send_error(s, err);
  std::vector<GenRequest> gens;
  if (!api_build_generations(job->req, engine->tokenizer(), tmpl_, api_, gens, err)) return send_error(s, err);
  job->meta = api_meta_new(route, model_name_);
  job->choices.resize(gens.size());
  job->running = (int)gens.size();
  const auto eod = engine->tokenizer().eod_id();
  std::vector<std::shared_ptr<GenRequest>> subs;
  for (size_t i = 0; i < gens.size(); i++) {
    job->choices[i].prompt = gens[i].prompt;
    subs.push_back(std::make_shared<GenRequest>(std::move(gens[i])));
    attach(job, i, *subs.back(), eod ? (int32_t)*eod : -1);
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    in_flight_++;
  }
  std::string why;
  int which = -1;
  // all the prompts or none: a list is never half run
  if (const Admission a = engine->submit_all(std::move(subs), &why, &which); a != Admission::kAccepted) {
    request_ended();
    return refused(a, why, job->req, which, s);
  }
  if (job->req.stream) return stream(job, s);
  {
    std::unique_lock<std::mutex> lk(job->mu);
    job->cv.wait(lk, [&] { return job->done; });
  }
  send_json(s, 200, api_response(job->req, job->meta, job->choices, engine->tokenizer()));
  request_ended();
}

void HttpServer::stream(std::shared_ptr<Job> job, Res& s) {
  struct State {
    bool first = true;
    std::string sent;  // text written so far (after the echo)
  };
  auto st = std::make_shared<State>();
  const Tokenizer* tok = &engine_.load()->tokenizer();
  s.status = 200;
  s.set_header("Cache-Control", "no-cache");
  s.set_header("X-Accel-Buffering", "no");  // proxies: pass each event on at once
  s.set_chunked_content_provider(
      "text/event-stream",
      [job, st, tok](size_t, httplib::DataSink& sink) {
        // a chunk that cannot be written: the client is gone; the next on_token frees the slot
        auto write = [&](const json& j) {
          const std::string ev = api_sse(j);
          if (sink.write(ev.data(), ev.size())) return true;
          job->cancelled = true;
          return false;
        };
        const ApiRequest& r = job->req;
        if (st->first) {  // headers are out: the role (chat) or the echoed prompt (completions)
          st->first = false;
          std::string echo;
          if (r.echo) {
            const std::vector<int32_t>& prompt = job->choices[0].prompt;
            std::vector<uint32_t> ids(prompt.begin(), prompt.end());
            tok->decode(ids.data(), ids.size(), echo);
          }
          if (r.route == ApiRoute::kChat || !echo.empty()) {
            if (!write(api_chunk_first(r, job->meta, echo))) return false;
          }
          return true;
        }
        std::deque<TokenEvent> evs;
        bool done;
        {
          std::unique_lock<std::mutex> lk(job->mu);
          job->cv.wait_for(lk, std::chrono::milliseconds(200), [&] { return !job->pending.empty() || job->done; });
          evs.swap(job->pending);
          done = job->done;
        }
        for (const auto& ev : evs) {
          if (!write(api_chunk_token(r, job->meta, ev, *tok, st->sent.size()))) return false;
          st->sent += ev.text;
        }
        if (done) {
          const GenResult& res = job->choices[0].result;
          // the text the engine held back (a possible stop string that was not one, the end of
          // an unfinished character) comes with the last chunk
          std::string tail;
          if (res.text.size() > st->sent.size() && res.text.compare(0, st->sent.size(), st->sent) == 0)
            tail = res.text.substr(st->sent.size());
          bool ok = write(api_chunk_last(r, job->meta, tail, res.finish));
          if (ok && r.include_usage) ok = write(api_chunk_usage(r, job->meta, res.prompt_tokens, res.completion_tokens));
          if (ok) ok = sink.write(kApiSseDone, std::strlen(kApiSseDone));  // (done: nothing to cancel)
          if (!ok) return false;
          sink.done();
          return true;
        }
        if (evs.empty() && !sink.is_writable()) {
          job->cancelled = true;
          return false;
        }
        return true;
      },
      [this, job](bool) {
        // the response is finished or abandoned: a request still running has lost its client
        {
          std::lock_guard<std::mutex> lk(job->mu);
          if (!job->done) job->cancelled = true;
        }
        request_ended();
      });
}

}  // namespace smelt
