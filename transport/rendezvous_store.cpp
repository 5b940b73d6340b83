#include "transport/rendezvous_store.hpp"

#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "protocol/errors.hpp"
#include "transport/exception_text.hpp"
#include "transport/unique_fd.hpp"

namespace hotswap::transport {

namespace {

using Clock = std::chrono::steady_clock;

// Whether one TCP connect to `address` completes within `wait` (refused, unreachable or slow:
// false). The connection is closed at once; a c10d store takes a client that leaves without a
// word as it takes one that crashed.
bool accepts_within(const addrinfo& address, std::chrono::milliseconds wait) {
  UniqueFd fd(::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                       address.ai_protocol));
  if (!fd.valid()) return false;
  if (::connect(fd.get(), address.ai_addr, address.ai_addrlen) == 0) return true;
  if (errno != EINPROGRESS) return false;
  pollfd p{fd.get(), POLLOUT, 0};
  if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(1, wait.count()))) != 1) return false;
  int error = 0;
  socklen_t len = sizeof(error);
  return ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
}

// Waits until the host's port accepts connections, up to `deadline`. torch 2's TCPStore client
// retries its connect with growing pauses and gives up well past its timeout (5 s asked: 12.9 s,
// measured with torch 2.14), so a rank whose trainer died before hosting would outlive
// --timeout; this wait keeps the deadline, and TCPStore then connects at once.
void wait_until_accepting(const Rendezvous& r, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(r.master_port);
  if (::getaddrinfo(r.master_address.c_str(), port.c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    throw protocol::TransferError("rendezvous at " + r.describe() + " failed: cannot resolve '" +
                                  r.master_address + "'");
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
  while (true) {
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (accepts_within(*a, std::clamp(left, std::chrono::milliseconds(1),
                                        std::chrono::milliseconds(1000)))) {
        return;
      }
    }
    if (Clock::now() >= deadline) {
      throw protocol::TimeoutError("rendezvous at " + r.describe() + ": nothing accepted a " +
                                   "connection at " + r.master_address + ":" + port + " within " +
                                   std::to_string(r.timeout.count()) +
                                   " ms (is the trainer that hosts the store up?)");
    }
    std::this_thread::sleep_for(
        std::min<Clock::duration>(std::chrono::milliseconds(50), deadline - Clock::now()));
  }
}

}  // namespace

std::string Rendezvous::describe() const {
  return master_address + ":" + std::to_string(master_port) + " as rank " + std::to_string(rank) +
         " of " + std::to_string(world_size);
}

void keep_broken_pipes_from_killing_the_process() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

RendezvousStore::RendezvousStore(const Rendezvous& r) : rendezvous_(r) {
  if (r.world_size < 1 || r.rank < 0 || r.rank >= r.world_size) {
    throw protocol::ValueError("rank " + std::to_string(r.rank) + " is outside world_size " +
                               std::to_string(r.world_size));
  }
  keep_broken_pipes_from_killing_the_process();
  if (r.master_port < 1 || r.master_port > 65535) {
    throw protocol::ValueError("master_port " + std::to_string(r.master_port) +
                               " is not a TCP port");
  }
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(r.master_port);
  options.isServer = r.rank == 0;
  options.numWorkers = static_cast<std::size_t>(r.world_size);
  options.waitWorkers = true;  // every rank adds 1 to "init/"; the host waits for world_size
  options.timeout = r.timeout;
  if (!options.isServer) {
    const auto deadline = Clock::now() + r.timeout;
    wait_until_accepting(r, deadline);
    options.timeout =
        std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                 std::chrono::milliseconds(1000));
  }
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(r.master_address, options);
    store_->setTimeout(r.timeout);  // the store's waits get the whole timeout, not what was left
  } catch (const std::exception& e) {
    throw protocol::TransferError("rendezvous at " + r.describe() +
                                  " failed: " + one_line_cause(e));
  }
}

RendezvousStore::~RendezvousStore() = default;
RendezvousStore::RendezvousStore(RendezvousStore&&) noexcept = default;
RendezvousStore& RendezvousStore::operator=(RendezvousStore&&) noexcept = default;

c10::intrusive_ptr<c10d::Store> RendezvousStore::store() const {
  return store_;
}

void RendezvousStore::set(const std::string& key, std::string_view value) {
  try {
    store_->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
    // c10d's set is sent without a reply; a check on the same connection is answered only after
    // the store has taken what came before it. Without it a rank that posted why it failed, then
    // broke the group, could be read before its note landed (seen in e2e.many_senders under
    // load: rank 0 named its own broken broadcast instead of the peer's cause).
    store_->check({key});
  } catch (const std::exception& e) {
    throw protocol::TransferError("setting '" + key + "' in the store at " +
                                  rendezvous_.describe() + " failed: " + one_line_cause(e));
  }
}

std::string RendezvousStore::get(const std::string& key) {
  return get(key, rendezvous_.timeout);
}

std::string RendezvousStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  try {
    store_->wait({key}, timeout);
    auto bytes = store_->get(key);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception& e) {
    throw protocol::TimeoutError("'" + key + "' did not appear in the store at " +
                                 rendezvous_.describe() + " within " +
                                 std::to_string(timeout.count()) + " ms: " + one_line_cause(e));
  }
}

std::optional<std::string> RendezvousStore::try_get(const std::string& key) {
  try {
    if (!store_->check({key})) return std::nullopt;
    auto bytes = store_->get(key);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception&) {
    return std::nullopt;  // a store that is gone has nothing to tell
  }
}

}  // namespace hotswap::transport
