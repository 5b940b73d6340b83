// Communicator: the collectives a weight transfer needs (broadcast of one contiguous tensor from
// a root, and a sum all-reduce), each bounded by a timeout, over a group of `world_size` ranks.
// The gloo implementation runs on the CPU everywhere; the NCCL one on GPUs. Engines are written
// against this interface once, so the gloo and nccl backends share one sequencing.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>

namespace hotswap::transport {

class RendezvousStore;

// A collective started and not yet waited for. It keeps its tensors alive until it completes,
// even when the handle is dropped unwaited (on an error path).
class PendingCollective {
 public:
  virtual ~PendingCollective();
  // Blocks until the collective completed: TransferError or TimeoutError as the blocking call.
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator();

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Where the collectives' tensors must live: host memory for gloo (a CPU
  // collective), the device for NCCL. A caller with tensors elsewhere moves them.
  virtual c10::DeviceType device_type() const { return c10::DeviceType::CPU; }

  // `tensor` must be contiguous: the root sends its bytes, every other rank receives into it.
  // TransferError (or TimeoutError) when a peer fails or the timeout passes.
  virtual void broadcast(at::Tensor& tensor, int root, std::chrono::milliseconds timeout) = 0;
  // The same broadcast, returning once it is under way where the implementation can overlap
  // it with the next (gloo); broadcasts still complete in the order they were started, and
  // every rank starts them in the same order. The default runs it to completion first.
  virtual std::unique_ptr<PendingCollective> start_broadcast(at::Tensor tensor, int root,
                                                             std::chrono::milliseconds timeout);
  virtual void all_reduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) = 0;
  // The same all-reduce for a caller that reads the sum only through the device's own ordering
  // (the kernels it queues next on its current stream): on a device communicator (NCCL) it is
  // queued after the caller's work and before the caller's next kernels, and the host does not
  // wait. Tensor-parallel forward steps issue two per layer; a host wait for each made decode
  // launch-bound. Every queued collective is waited for, against a timeout, by the next
  // wait_queued(), which a caller calls once per step before it reads a result on the host. The
  // default (gloo, a host collective) runs it to completion at once.
  virtual void queue_all_reduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout);
  // Blocks until every collective queued so far has completed on the device: TransferError or
  // TimeoutError (the communicator then aborted) as the blocking calls. A no-op when none is.
  virtual void wait_queued(std::chrono::milliseconds timeout);
  // Makes every blocked or later call fail promptly; the communicator is unusable afterwards.
  virtual void abort() = 0;
  // The TCPStore the group met through, for the little the ranks of one side must tell each
  // other outside the collectives (a trainer's ranks agreeing who sends what); nullptr when the
  // group met without one (NCCL's unique-id mode); not to be used after abort().
  virtual RendezvousStore* store() { return nullptr; }
};

}  // namespace hotswap::transport
