#include "worker/parallel/rank_collectives.hpp"

#include <algorithm>
#include <string>

#include "protocol/errors.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/nccl_communicator.hpp"

namespace hotswap::worker {
namespace {

// Where rank 0 leaves the NCCL unique id in the gloo group's store: the 128 raw bytes (both ends
// are hotswap, so no pickle as vLLM's trainer rendezvous needs).
constexpr const char* kUniqueIdKey = "hotswap/tensor_parallel/nccl_unique_id";

}  // namespace

RankCollectives::RankCollectives(const transport::Rendezvous& rendezvous, const c10::Device& device)
    : gloo_(std::make_shared<transport::GlooCommunicator>(rendezvous)) {
  if (!device.is_cuda()) return;
  transport::RendezvousStore& store = *gloo_->store();
  transport::NcclUniqueId id{};
  if (rendezvous.rank == 0) {
    id = transport::new_nccl_unique_id();
    store.set(kUniqueIdKey, std::string_view(reinterpret_cast<const char*>(id.data()), id.size()));
  } else {
    const std::string bytes = store.get(kUniqueIdKey);
    if (bytes.size() != id.size()) {
      throw protocol::RuntimeError("the tensor-parallel group's NCCL unique id has " +
                                   std::to_string(bytes.size()) + " bytes, not " +
                                   std::to_string(id.size()));
    }
    std::copy(bytes.begin(), bytes.end(), id.begin());
  }
  nccl_ = std::make_shared<transport::NcclCommunicator>(
      transport::NcclSetup{id, rendezvous.rank, rendezvous.world_size,
                           device.has_index() ? device.index() : 0, rendezvous.timeout});
}

void RankCollectives::abort() {
  if (nccl_) nccl_->abort();
  gloo_->abort();
}

}  // namespace hotswap::worker
