#include "worker/peer_hangup.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace hotswap::worker {
namespace {

// The numeric address and port of one end of a socket; port -1 when it is no TCP/IP socket.
std::pair<std::string, int> end_of(int fd, bool peer) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  auto* raw = reinterpret_cast<sockaddr*>(&addr);
  if ((peer ? ::getpeername(fd, raw, &len) : ::getsockname(fd, raw, &len)) != 0) return {"", -1};
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return {text, ntohs(in->sin_port)};
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof text);
    return {text, ntohs(in->sin6_port)};
  }
  return {"", -1};
}

}  // namespace

PeerHangup::PeerHangup(const std::string& local_addr, int local_port,
                       const std::string& remote_addr, int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return;
  int match = -1, matches = 0;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    auto [peer_addr, peer_port] = end_of(static_cast<int>(fd), /*peer=*/true);
    if (peer_port != remote_port || peer_addr != remote_addr) continue;
    auto [own_addr, own_port] = end_of(static_cast<int>(fd), /*peer=*/false);
    if (own_port != local_port || own_addr != local_addr) continue;
    match = static_cast<int>(fd);
    ++matches;
  }
  ::closedir(dir);
  if (matches == 1) fd_ = match;
}

bool PeerHangup::hung_up() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace hotswap::worker
