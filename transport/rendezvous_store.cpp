#include "transport/rendezvous_store.hpp"

#include <signal.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "protocol/errors.hpp"
#include "transport/exception_text.hpp"

namespace hotswap::transport {

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
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(r.master_address, options);
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
