#include "transport/communicator.hpp"

namespace hotswap::transport {

namespace {
// A broadcast that ran to completion when it was started.
class CompletedCollective final : public PendingCollective {
 public:
  void wait() override {}
};
}  // namespace

Communicator::~Communicator() = default;
PendingCollective::~PendingCollective() = default;

std::unique_ptr<PendingCollective> Communicator::start_broadcast(
    at::Tensor tensor, int root, std::chrono::milliseconds timeout) {
  broadcast(tensor, root, timeout);
  return std::make_unique<CompletedCollective>();
}

void Communicator::queue_all_reduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) {
  all_reduce_sum(tensor, timeout);
}

void Communicator::wait_queued(std::chrono::milliseconds) {}

}  // namespace hotswap::transport
