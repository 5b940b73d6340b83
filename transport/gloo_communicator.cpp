#include "transport/gloo_communicator.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <mutex>
#include <random>

#include "protocol/errors.hpp"
#include "transport/exception_text.hpp"
#include "transport/gloo_backend.hpp"
#include "transport/posix_check.hpp"
#include "transport/rendezvous_store.hpp"
#include "transport/unique_fd.hpp"

namespace hotswap::transport {

struct GlooCommunicator::State {
  std::mutex mutex;  // guards the pointers below against abort() from another thread
  std::unique_ptr<RendezvousStore> store;
  c10::intrusive_ptr<c10d::Backend> group;

  c10::intrusive_ptr<c10d::Backend> current() {
    std::lock_guard lock(mutex);
    if (!group) throw protocol::TransferError("the gloo communicator was aborted");
    return group;
  }
};

std::string local_address_towards(const std::string& remote) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(remote.c_str(), "9", &hints, &found) != 0 || found == nullptr) {
    throw protocol::ValueError("cannot resolve master_address '" + remote + "'");
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  std::string local = "127.0.0.1";
  // A UDP "connect" sends nothing; it only asks the kernel which interface routes there.
  if (fd.valid() && ::connect(fd.get(), found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      char text[INET_ADDRSTRLEN];
      local = ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
    }
  }
  return local;
}

namespace {

// The first port of the kernel's ephemeral range; Linux's default when it cannot be read.
int first_ephemeral_port() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 0;
  if (range >> first && first > 0) return first;
  return 32768;
}

// The port `port` binds on `address` now (0: the kernel's pick), or 0 when it is taken. No
// SO_REUSEADDR: a port still in TIME_WAIT counts as taken. Any other failure (an address that is
// not this host's) throws, naming `host`.
int bind_probe(sockaddr_in address, int port, const std::string& host) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  HOTSWAP_POSIX_CHECK(fd.get(), "open", "a TCP socket to find a free port");
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    if (errno == EADDRINUSE || errno == EACCES) return 0;
    throw_posix_error(errno, "bind a TCP socket to find a free port on", host);
  }
  socklen_t len = sizeof(address);
  HOTSWAP_POSIX_CHECK(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &len),
                      "read the port bound on a probe socket", "");
  return ntohs(address.sin_port);
}

}  // namespace

int pick_free_port(const std::string& host, int consecutive) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    throw protocol::ValueError("'" + host + "' is not an IPv4 address");
  }
  if (consecutive < 1 || consecutive > 64) {
    throw protocol::ValueError("cannot pick " + std::to_string(consecutive) +
                               " consecutive ports (1 to 64)");
  }
  // Below 10000 lie the well-known ports and most services' registered ones.
  constexpr int kLowest = 10000;
  const int highest = first_ephemeral_port() - consecutive;
  const bool below_ephemeral = highest - kLowest >= 1000;
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> candidates(kLowest, std::max(kLowest, highest));
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int first = bind_probe(address, below_ephemeral ? candidates(random) : 0, host);
    if (first == 0 || first + consecutive - 1 > 65535) continue;
    int free = 1;
    while (free < consecutive && bind_probe(address, first + free, host) != 0)
      ++free;
    if (free == consecutive) return first;
  }
  throw protocol::TransferError("found no " + std::to_string(consecutive) +
                                " consecutive free TCP port(s) on " + host + " in 200 tries");
}

GlooCommunicator::GlooCommunicator(const GlooRendezvous& r)
    : state_(std::make_unique<State>()), rank_(r.rank), world_size_(r.world_size) {
  if (r.rank < 0 || r.rank >= r.world_size) {
    throw protocol::ValueError("gloo rank " + std::to_string(r.rank) + " is outside world_size " +
                               std::to_string(r.world_size));
  }
  state_->store = std::make_unique<RendezvousStore>(r);
  try {
    // Two threads, so that a receiver can have two broadcasts under way: gloo sends a message
    // only once its receiver has posted the buffer, and with one thread every broadcast paid
    // that handshake and the drain of the socket's pipeline (pieces of 16 MiB ran at 0.55-0.65x
    // one broadcast of the same bytes; with the next one posted early, 0.9-1.05x).
    state_->group = make_gloo_backend(state_->store->store(),
                                      {.rank = r.rank,
                                       .world_size = r.world_size,
                                       .timeout = r.timeout,
                                       .local_address = local_address_towards(r.master_address),
                                       .threads = 2});
  } catch (const protocol::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw protocol::TransferError("gloo rendezvous at " + r.describe() +
                                  " failed: " + one_line_cause(e));
  }
  // The warm-up all-reduce vLLM's communicators issue before any broadcast.
  at::Tensor warm = at::zeros({1}, at::TensorOptions().dtype(at::kFloat));
  all_reduce_sum(warm, r.timeout);
}

GlooCommunicator::~GlooCommunicator() = default;

namespace {
void wait(const c10::intrusive_ptr<c10d::Work>& work, std::chrono::milliseconds timeout,
          const char* what) {
  try {
    work->wait(timeout);
  } catch (const std::exception& e) {
    const std::string text = one_line_cause(e);
    if (text.find("imed out") != std::string::npos || text.find("imeout") != std::string::npos) {
      throw protocol::TimeoutError(std::string("gloo ") + what + " did not complete within " +
                                   std::to_string(timeout.count()) + " ms: " + text);
    }
    throw protocol::TransferError(std::string("gloo ") + what + " failed: " + text);
  }
}
}  // namespace

namespace {
// A gloo broadcast under way. Its Work holds the tensor until the group's thread is done with
// it, waited for or not.
class GlooPendingBroadcast final : public PendingCollective {
 public:
  GlooPendingBroadcast(c10::intrusive_ptr<c10d::Work> work, std::chrono::milliseconds timeout)
      : work_(std::move(work)), timeout_(timeout) {}
  void wait() override {
    if (work_) hotswap::transport::wait(work_, timeout_, "broadcast");
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;  // null for an empty tensor: nothing to move
  std::chrono::milliseconds timeout_;
};
}  // namespace

void GlooCommunicator::broadcast(at::Tensor& tensor, int root, std::chrono::milliseconds timeout) {
  start_broadcast(tensor, root, timeout)->wait();
}

std::unique_ptr<PendingCollective> GlooCommunicator::start_broadcast(
    at::Tensor tensor, int root, std::chrono::milliseconds timeout) {
  auto group = state_->current();
  // Every rank skips an empty tensor alike: sizes come from metadata.
  if (tensor.numel() == 0)
    return std::make_unique<GlooPendingBroadcast>(c10::intrusive_ptr<c10d::Work>(), timeout);
  // A broadcast moves bytes: sending them as uint8 works for every dtype, including those gloo
  // has no arithmetic for (bfloat16, bool).
  std::vector<at::Tensor> tensors{tensor.view({-1}).view(at::kByte)};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = timeout;
  return std::make_unique<GlooPendingBroadcast>(group->broadcast(tensors, options), timeout);
}

void GlooCommunicator::all_reduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) {
  auto group = state_->current();
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.timeout = timeout;
  wait(group->allreduce(tensors, options), timeout, "all-reduce");
}

RendezvousStore* GlooCommunicator::store() {
  std::lock_guard lock(state_->mutex);
  return state_->store.get();
}

void GlooCommunicator::abort() {
  // Gloo has no abort: dropping the group closes its pairs, so peers blocked on this rank see
  // their connections fail instead of waiting out their timeouts.
  std::lock_guard lock(state_->mutex);
  state_->group.reset();
  state_->store.reset();
}

}  // namespace hotswap::transport
