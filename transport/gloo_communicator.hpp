// GlooCommunicator: a Communicator over libtorch's c10d ProcessGroupGloo, with the rendezvous
// vLLM's StatelessProcessGroup uses: rank 0 (the trainer) hosts a c10d TCPStore at
// master_address:master_port and waits for `world_size` registrations; every other rank joins
// it as a client. Then the warm-up all-reduce of one float32, as vLLM's communicators do.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "transport/communicator.hpp"
#include "transport/rendezvous_store.hpp"

namespace hotswap::transport {

using GlooRendezvous = Rendezvous;

class GlooCommunicator final : public Communicator {
 public:
  // Blocks until every rank has joined (or the timeout passes: TimeoutError).
  explicit GlooCommunicator(const GlooRendezvous& rendezvous);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  void broadcast(at::Tensor& tensor, int root, std::chrono::milliseconds timeout) override;
  std::unique_ptr<PendingCollective> start_broadcast(at::Tensor tensor, int root,
                                                     std::chrono::milliseconds timeout) override;
  void all_reduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) override;
  void abort() override;
  RendezvousStore* store() override;

 private:
  struct State;
  std::unique_ptr<State> state_;
  int rank_;
  int world_size_;
};

// The local address this host uses to reach `remote` (loopback for a loopback master).
std::string local_address_towards(const std::string& remote);

// The first of `consecutive` TCP ports on `host` that were free a moment ago, for a rendezvous
// (or a worker's --port) whose port nobody chose. Picked at random below the kernel's ephemeral
// range (/proc/sys/net/ipv4/ip_local_port_range), where only someone asking for that very number
// can take it before its binder gets there: in that range every bind(0) and every outgoing
// connection of every process may land on it (a test's Python store host, binding its port
// seconds after the pick, once met a stranger there). Falls back to the kernel's pick when the
// range leaves no room below it. TransferError when nothing is free.
int pick_free_port(const std::string& host = "127.0.0.1", int consecutive = 1);

}  // namespace hotswap::transport
