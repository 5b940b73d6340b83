// RawConnection: one TCP connection to a server on loopback, for tests that need the bytes on
// the wire (framing, deadlines, a client that reads late), closed on every exit path.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace hotswap::testing {

class RawConnection {
 public:
  using Clock = std::chrono::steady_clock;

  // `receive_buffer` (bytes), when given, is set before connecting, so that the window the
  // client advertises is small from the start: the server's socket fills when it reads late.
  explicit RawConnection(int port, int receive_buffer = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ >= 0 && receive_buffer > 0) {
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("cannot connect to port " + std::to_string(port));
    }
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool send(const std::string& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  // Reads what arrives until the peer closes or `limit` passes; true when it closed.
  bool read_until_closed(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (!read_some(deadline)) return closed_;
    }
    return closed_;
  }

  // Reads until what arrived since the last call holds `marker` (or `limit` passes, or the peer
  // closes), and returns that part.
  std::string read_until(const std::string& marker, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (received_.find(marker, taken_) == std::string::npos && Clock::now() < deadline) {
      if (!read_some(deadline)) break;
    }
    std::string out = received_.substr(taken_);
    taken_ = received_.size();
    return out;
  }

  // Reads until `count` whole responses (Content-Length framed) have arrived or `limit` passes.
  std::vector<std::string> responses(std::size_t count, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    std::vector<std::string> out;
    std::size_t at = 0;
    while (out.size() < count) {
      const std::size_t head_end = received_.find("\r\n\r\n", at);
      if (head_end != std::string::npos) {
        const std::string head = received_.substr(at, head_end - at);
        std::size_t length = 0;
        const std::size_t cl = lower(head).find("content-length:");
        if (cl != std::string::npos) length = std::stoul(head.substr(cl + 15));
        if (received_.size() >= head_end + 4 + length) {
          out.push_back(received_.substr(at, head_end + 4 + length - at));
          at = head_end + 4 + length;
          continue;
        }
      }
      if (Clock::now() >= deadline || !read_some(deadline)) break;
    }
    return out;
  }

  const std::string& received() const { return received_; }

 private:
  static std::string lower(std::string text) {
    for (auto& c : text)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  }
  bool read_some(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0))) <= 0) return false;
    char buffer[65536];
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    received_.append(buffer, static_cast<std::size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string received_;
  std::size_t taken_ = 0;  // of received_, by read_until
  bool closed_ = false;
};

}  // namespace hotswap::testing
