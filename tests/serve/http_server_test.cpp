// HttpServer (serve/http_server.hpp) in-process, before any model is ready: /health and the model
// routes answer 503 "loading" with an OpenAI error object, the key still guards every route but
// /health, routing errors are 404/405 as always, /metrics renders without an engine, and a stop
// before ready() leaves nothing to serve (ready() then says so), also right after start(). The served behaviour with a model
// is tests/serve/serve_test.cpp.
#include <poll.h>

#include <chrono>
#include <future>
#include <vector>

#include <gtest/gtest.h>

#include "serve/raw_http.hpp"
#include "smelt/serve/http_server.hpp"

using namespace smelt;
using namespace smelt::test;

namespace {

TEST(HttpServer, AnswersWhileLoadingAndStopsCleanly) {
  HttpConfig c;
  c.port = 0;
  c.api_key = "k";
  c.threads = 4;
  HttpServer s(c);
  ASSERT_TRUE(s.bind());
  ASSERT_GT(s.port(), 0);
  s.start();
  Reply h = http(s.port(), "GET", "/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.js()["error"]["code"], "loading");
  EXPECT_EQ(h.headers["retry-after"], "1");
  EXPECT_EQ(http(s.port(), "GET", "/v1/models", "", "k").status, 503);
  EXPECT_EQ(http(s.port(), "POST", "/v1/completions", R"({"prompt": "a"})", "k").status, 503);
  EXPECT_EQ(http(s.port(), "POST", "/v1/completions", R"({"prompt": "a"})").status, 401);
  EXPECT_EQ(http(s.port(), "GET", "/metrics").status, 401);
  Reply m = http(s.port(), "GET", "/metrics", "", "k");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("smelt_slots 0"), std::string::npos) << m.body;
  EXPECT_EQ(http(s.port(), "GET", "/nope", "", "k").status, 404);
  EXPECT_EQ(http(s.port(), "PUT", "/tokenize", "{}", "k").status, 405);

  // a second server cannot take the same port; the error names it
  HttpConfig c2;
  c2.port = s.port();
  HttpServer twin(c2);
  Status b = twin.bind();
  EXPECT_FALSE(b);
  EXPECT_NE(b.message().find(std::to_string(s.port())), std::string::npos) << b.message();

  s.shutdown(0);
  EXPECT_TRUE(s.join());
  EXPECT_TRUE(s.stopping());
  Engine e;  // never started: ready() must refuse it without touching it
  EXPECT_FALSE(s.ready(&e, "m"));
  EXPECT_EQ(connect_port(s.port()), -1);
}

// A stop right after start() (smelt serve when the model fails to load) must end the listener:
// httplib's stop() is a no-op until its accept loop runs, which left join() waiting for ever.
TEST(HttpServer, AStopRightAfterStartEndsTheListener) {
  for (int i = 0; i < 50; i++) {
    HttpConfig c;
    c.port = 0;
    c.threads = 2;
    HttpServer s(c);
    ASSERT_TRUE(s.bind());
    s.start();
    s.shutdown(0);
    auto joined = std::async(std::launch::async, [&] { return s.join(); });
    ASSERT_EQ(joined.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "round " << i;
    EXPECT_TRUE(joined.get());
  }
}

// The listen queue holds a burst of connections: 32 clients connect before the listener accepts
// any (it is not even started), and every connect completes at once. With the library's backlog
// of 5 only 6 got in; the others' SYNs were dropped and retried a second later.
TEST(HttpServer, TheListenQueueHoldsABurstOfConnections) {
  HttpConfig c;
  c.port = 0;
  HttpServer s(c);
  ASSERT_TRUE(s.bind());
  std::vector<int> fds;
  for (int i = 0; i < 32; i++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)s.port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connect(fd, (sockaddr*)&a, sizeof a);  // EINPROGRESS or done
    fds.push_back(fd);
  }
  int connected = 0;
  for (int fd : fds) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (poll(&p, 1, 300) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) connected++;
    close(fd);
  }
  EXPECT_EQ(connected, 32);
}

}  // namespace
