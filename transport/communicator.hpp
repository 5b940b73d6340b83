// Communicator: the collectives a weight transfer needs (broadcast of one contiguous tensor from
// a root, and a sum all-reduce), each bounded by a timeout, over a group of `world_size` ranks.
// The gloo implementation runs on the CPU everywhere; the NCCL one on GPUs. Engines are written
// against this interface once, so the gloo and nccl backends share one sequencing.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>

namespace hotswap::transport {

class RendezvousStore;

class Communicator {
 public:
  virtual ~Communicator();

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // `tensor` must be contiguous: the root sends its bytes, every other rank receives into it.
  // TransferError (or TimeoutError) when a peer fails or the timeout passes.
  virtual void broadcast(at::Tensor& tensor, int root, std::chrono::milliseconds timeout) = 0;
  virtual void all_reduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) = 0;
  // Makes every blocked or later call fail promptly; the communicator is unusable afterwards.
  virtual void abort() = 0;
  // The TCPStore the group met through, for the little the ranks of one side must tell each
  // other outside the collectives (a trainer's ranks agreeing who sends what); nullptr when the
  // group met without one (NCCL's unique-id mode); not to be used after abort().
  virtual RendezvousStore* store() { return nullptr; }
};

}  // namespace hotswap::transport
