// ReceivePipeline: a receiver's broadcasts kept a fixed number deep, so that the next one is
// posted while the current one's bytes arrive. Gloo sends a message only once its receiver has
// posted the buffer: a receiver that posts one broadcast at a time makes every tensor pay that
// handshake and the drain of the socket, which cost unpacked gloo a third of its rate.
//
// The sender does not need it (its broadcast completes once the bytes are in the socket, and
// the receiver's early post lets the next one go at once), which matters: a trainer's source
// may reuse a tensor as soon as the next one is taken.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <utility>

#include "transport/communicator.hpp"

namespace hotswap::transport {

class ReceivePipeline {
 public:
  static constexpr std::size_t kDepth = 2;

  ReceivePipeline(Communicator& communicator, std::chrono::milliseconds timeout)
      : communicator_(communicator), timeout_(timeout) {}

  // Starts receiving `tensor` from `root`; `then` runs once it has arrived, after every earlier
  // one's, on the calling thread (in this call or a later one). May wait for the oldest.
  void receive(at::Tensor tensor, int root, std::function<void()> then) {
    if (pending_.size() == kDepth) complete_oldest();
    pending_.push_back(
        {communicator_.start_broadcast(std::move(tensor), root, timeout_), std::move(then)});
  }

  // Waits for the oldest broadcasts, running their `then`s, until at most `outstanding` are
  // under way: before a receive buffer is reused, its previous broadcast must have landed.
  void drain_to(std::size_t outstanding) {
    while (pending_.size() > outstanding)
      complete_oldest();
  }

  // Waits for every broadcast started and runs their `then`s. Throws the first failure; the
  // rest are left to the communicator's teardown (each keeps its tensor alive until then).
  void finish() { drain_to(0); }

 private:
  struct Pending {
    std::unique_ptr<PendingCollective> collective;
    std::function<void()> then;
  };

  void complete_oldest() {
    Pending oldest = std::move(pending_.front());
    pending_.pop_front();
    oldest.collective->wait();
    if (oldest.then) oldest.then();
  }

  Communicator& communicator_;
  std::chrono::milliseconds timeout_;
  std::deque<Pending> pending_;
};

}  // namespace hotswap::transport
