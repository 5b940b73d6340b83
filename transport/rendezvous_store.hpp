// RendezvousStore: the c10d TCPStore of a weight-transfer group, built the way vLLM's
// StatelessProcessGroup builds it, so that hotswap and vLLM processes can meet in one group.
// Rank 0 (the trainer) hosts the store at master_address:master_port and blocks until
// `world_size` ranks have registered (the "init/" counter); every other rank connects (retrying
// until the timeout: the host may come up later) and registers. Keys travel with c10d's "/"
// prefix, as Python's `store.get("broadcast_from/0/0")` sends them.
//
// The store's wire protocol is the linked torch's (torch 2, as vLLM's trainers run): torch 2
// renumbered the queries (VALIDATE first), so torch 1 peers cannot join. A joining rank waits
// for the host's port itself, within the timeout, before c10d connects (see the .cpp: c10d's
// own connect overshoots its timeout).
//
// gloo builds its process group on the store; NCCL's TCP mode only reads the unique id that
// rank 0 put under `broadcast_from/0/0` (transport/nccl_unique_id.hpp).
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/timeouts.hpp"

namespace c10d {
class Store;
class TCPStore;
}  // namespace c10d

namespace hotswap::transport {

// c10d's store and gloo's pairs write to TCP sockets that may raise SIGPIPE when the peer is
// gone (a worker killed mid-round), and SIGPIPE's default action ends the process without a
// word, where the call should fail with EPIPE. Python processes ignore SIGPIPE already; a C++
// process that left it at its default gets it ignored here, once a rendezvous starts. A handler
// someone installed stays. (hotswap-worker ignores it from the start.)
void keep_broken_pipes_from_killing_the_process();

struct Rendezvous {
  std::string master_address;
  int master_port = 0;
  int rank = 0;
  int world_size = 0;
  std::chrono::milliseconds timeout{protocol::kDefaultTimeout};

  std::string describe() const;  // "127.0.0.1:29500 as rank 1 of 3"
};

class RendezvousStore {
 public:
  // Blocks as described above; TransferError naming the rendezvous when it fails or times out,
  // ValueError for a rank outside the world.
  explicit RendezvousStore(const Rendezvous& rendezvous);
  ~RendezvousStore();
  RendezvousStore(RendezvousStore&&) noexcept;
  RendezvousStore& operator=(RendezvousStore&&) noexcept;

  const Rendezvous& rendezvous() const { return rendezvous_; }
  c10::intrusive_ptr<c10d::Store> store() const;

  // Returns once the store holds the value, so that any rank reading after that sees it (c10d's
  // TCPStore sends a set without waiting for the store to take it).
  void set(const std::string& key, std::string_view value);
  // Waits for `key` up to the rendezvous timeout (TimeoutError naming the key).
  std::string get(const std::string& key);
  // The same with a wait of its own, for a step that must not take the whole timeout.
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  // The value of `key` if it is there now; never waits.
  std::optional<std::string> try_get(const std::string& key);

 private:
  Rendezvous rendezvous_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace hotswap::transport
