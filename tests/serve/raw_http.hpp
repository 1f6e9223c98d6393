// Test helper: raw HTTP/1.1 over loopback sockets for the serve tests (requests with
// Connection: close, so a reply ends at EOF; chunked bodies decoded; a burst of requests released
// together). Not an HTTP client library: just enough to see every byte the server sends.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace smelt::test {

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // chunked transfer decoded
  std::string raw;
  nlohmann::json js() const { return nlohmann::json::parse(body, nullptr, false); }
};

inline int connect_port(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (sockaddr*)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

inline void send_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += (size_t)n;
  }
}

inline std::string read_all(int fd) {
  std::string out;
  char buf[16384];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, (size_t)n);
  return out;
}

inline Reply parse_reply(const std::string& raw) {
  Reply r;
  r.raw = raw;
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  std::istringstream head(raw.substr(0, end));
  std::string line;
  std::getline(head, line);
  if (line.size() > 12) r.status = std::atoi(line.c_str() + 9);
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t c = line.find(':');
    if (c == std::string::npos) continue;
    std::string k = line.substr(0, c);
    for (char& ch : k) ch = (char)std::tolower((unsigned char)ch);
    r.headers[k] = line.substr(line.find_first_not_of(' ', c + 1));
  }
  std::string body = raw.substr(end + 4);
  if (r.headers["transfer-encoding"] == "chunked") {
    size_t p = 0;
    while (p < body.size()) {
      const size_t eol = body.find("\r\n", p);
      if (eol == std::string::npos) break;
      const size_t n = std::stoul(body.substr(p, eol - p), nullptr, 16);
      if (n == 0) break;
      r.body += body.substr(eol + 2, n);
      p = eol + 2 + n + 2;
    }
  } else {
    r.body = body;
  }
  return r;
}

inline std::string request_text(const std::string& method, const std::string& path, const std::string& body,
                         const std::string& key) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (!key.empty()) r += "Authorization: Bearer " + key + "\r\n";
  if (!body.empty() || method == "POST")
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

inline Reply http(int port, const std::string& method, const std::string& path, const std::string& body = "",
           const std::string& key = "") {
  int fd = connect_port(port);
  if (fd < 0) return {};
  send_all(fd, request_text(method, path, body, key));
  Reply r = parse_reply(read_all(fd));
  close(fd);
  return r;
}

// Requests sent whole but for their last byte, then released together: the server reads them
// within a fraction of a millisecond of each other.
inline std::vector<Reply> burst(int port, const std::vector<std::string>& requests) {
  std::vector<int> fds;
  for (const auto& q : requests) {
    fds.push_back(connect_port(port));
    send_all(fds.back(), q.substr(0, q.size() - 1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (size_t i = 0; i < fds.size(); i++) send_all(fds[i], requests[i].substr(requests[i].size() - 1));
  std::vector<Reply> out;
  for (int fd : fds) {
    out.push_back(parse_reply(read_all(fd)));
    close(fd);
  }
  return out;
}

// The SSE "data:" payloads of a streamed body, in order ("[DONE]" included).
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  std::istringstream in(body);
  for (std::string l; std::getline(in, l);)
    if (l.rfind("data: ", 0) == 0) out.push_back(l.substr(6));
  return out;
}

}  // namespace smelt::test
