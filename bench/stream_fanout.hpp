// The client side of the serving bench's concurrent streams: every request on its own
// connection, all of them driven by one thread over epoll, as vLLM's benchmark_serving drives its
// requests from one asyncio loop. With a thread per stream (64 threads reading the events on the
// worker's two cores) the client took the processor from the worker's stepping thread at every
// token; one thread reads a step's events for all streams in one wake.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "transport/unique_fd.hpp"

namespace hotswap::bench {

// What one stream's client saw.
struct FanoutStream {
  double first_token_s = 0;  // from the start of the fan-out to the first event with a token
  bool ok = false;           // a 200, a chunked body, and its last chunk
  std::string error;         // why not, when not
};

namespace detail {

// One connection's request and the response read so far (HTTP/1.1, chunked).
struct FanoutConnection {
  transport::UniqueFd fd;
  std::string request;
  std::size_t sent = 0;
  std::string in;          // bytes received and not yet consumed
  bool head_done = false;  // status line and headers consumed
  bool done = false;
  bool seen_token = false;
};

// Consumes what `c.in` holds of the response; true once the response has ended (well or not).
inline bool consume(FanoutConnection& c, FanoutStream& out, double now_s) {
  if (!c.head_done) {
    const auto end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) return false;
    const std::string_view head(c.in.data(), end);
    if (!head.starts_with("HTTP/1.1 200")) {
      out.error = std::string(head.substr(0, head.find("\r\n")));
      return true;
    }
    if (head.find("chunked") == std::string_view::npos) {
      out.error = "a 200 without a chunked body";
      return true;
    }
    c.in.erase(0, end + 4);
    c.head_done = true;
  }
  // Chunks: a hexadecimal size line, that many bytes, CRLF; a zero size ends the body.
  for (;;) {
    const auto line = c.in.find("\r\n");
    if (line == std::string::npos) return false;
    const std::size_t size = std::strtoul(c.in.c_str(), nullptr, 16);
    if (size == 0) {
      out.ok = true;
      return true;
    }
    if (c.in.size() < line + 2 + size + 2) return false;
    const std::string_view piece(c.in.data() + line + 2, size);
    if (!c.seen_token && piece.find("\"token") != std::string_view::npos) {
      out.first_token_s = now_s;
      c.seen_token = true;
    }
    c.in.erase(0, line + 2 + size + 2);
  }
}

}  // namespace detail

// POSTs each body to /v1/completions on 127.0.0.1:`port`, all at once, and reads every stream to
// its end (or until `timeout` passed: those streams end with an error).
inline std::vector<FanoutStream> stream_all(int port, const std::vector<std::string>& bodies,
                                            std::chrono::seconds timeout) {
  using Clock = std::chrono::steady_clock;
  std::vector<FanoutStream> out(bodies.size());
  std::vector<detail::FanoutConnection> conns(bodies.size());
  transport::UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  const auto start = Clock::now();
  std::size_t open = 0;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    auto& c = conns[i];
    c.request =
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
        "application/json\r\nConnection: close\r\nContent-Length: " +
        std::to_string(bodies[i].size()) + "\r\n\r\n" + bodies[i];
    c.fd = transport::UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    const int one = 1;
    ::setsockopt(c.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(c.fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 &&
        errno != EINPROGRESS) {
      out[i].error = "connect failed";
      c.done = true;
      continue;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT;
    ev.data.u64 = i;
    ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, c.fd.get(), &ev);
    ++open;
  }
  const auto deadline = start + timeout;
  std::vector<epoll_event> events(bodies.size() + 1);
  char buffer[1 << 16];
  while (open > 0 && Clock::now() < deadline) {
    const int n = ::epoll_wait(epoll.get(), events.data(), static_cast<int>(events.size()), 100);
    const double now_s = std::chrono::duration<double>(Clock::now() - start).count();
    for (int e = 0; e < n; ++e) {
      const std::size_t i = events[static_cast<std::size_t>(e)].data.u64;
      auto& c = conns[i];
      if (c.done) continue;
      bool ended = false;
      if (c.sent < c.request.size()) {
        const ssize_t sent =
            ::send(c.fd.get(), c.request.data() + c.sent, c.request.size() - c.sent, MSG_NOSIGNAL);
        if (sent > 0) c.sent += static_cast<std::size_t>(sent);
        if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
          out[i].error = "send failed";
          ended = true;
        } else if (c.sent == c.request.size()) {
          epoll_event ev{};
          ev.events = EPOLLIN;
          ev.data.u64 = i;
          ::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
        }
      }
      while (!ended) {
        const ssize_t got = ::recv(c.fd.get(), buffer, sizeof buffer, 0);
        if (got > 0) {
          c.in.append(buffer, static_cast<std::size_t>(got));
          continue;
        }
        if (got == 0) {
          ended = true;  // closed: consume() below says whether the body had ended
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
          out[i].error = "recv failed";
          ended = true;
        }
        break;
      }
      if (detail::consume(c, out[i], now_s) || ended) {
        if (!out[i].ok && out[i].error.empty()) out[i].error = "the stream ended early";
        ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
        c.fd.reset();
        c.done = true;
        --open;
      }
    }
  }
  for (std::size_t i = 0; i < conns.size(); ++i) {
    if (!conns[i].done) out[i].error = "no end within the timeout";
  }
  return out;
}

}  // namespace hotswap::bench
