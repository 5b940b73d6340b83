#include "receiver/nccl_engine.hpp"

#include <algorithm>

#include "protocol/backend_names.hpp"
#include "protocol/errors.hpp"
#include "receiver/sparse_broadcast_engine.hpp"
#include "transport/device.hpp"
#include "transport/nccl_communicator.hpp"
#include "transport/nccl_unique_id.hpp"
#include "transport/rendezvous_store.hpp"

namespace hotswap::receiver {
namespace {

// Where an NCCL backend can run at all; otherwise what to change, said at start.
void require_gpu(const EngineContext& context, std::string_view backend) {
  if (!transport::built_with_cuda()) {
    transport::throw_needs_gpu_build("the " + std::string(backend) + " backend needs");
  }
  if (!context.device.is_cuda()) {
    throw protocol::ValueError("the " + std::string(backend) +
                               " backend moves weights between GPUs, but this worker runs on " +
                               context.device.str() + "; start it with --device cuda:N");
  }
}

}  // namespace

BroadcastWeightTransferEngine::CommunicatorFactory nccl_communicator_factory(c10::Device device) {
  return [device](const protocol::NcclInitInfo& info, int rank,
                  std::chrono::milliseconds timeout) -> std::unique_ptr<transport::Communicator> {
    if (!info.uses_unique_id()) {
      return transport::join_nccl_group_through_store(
          transport::Rendezvous{*info.master_address, static_cast<int>(*info.master_port), rank,
                                static_cast<int>(info.world_size), timeout},
          transport::cuda_index(device));
    }
    transport::NcclUniqueId id{};
    std::copy(info.nccl_unique_id.begin(), info.nccl_unique_id.end(), id.begin());
    return std::make_unique<transport::NcclCommunicator>(transport::NcclSetup{
        id, rank, static_cast<int>(info.world_size), transport::cuda_index(device), timeout});
  };
}

std::unique_ptr<WeightTransferEngine> make_nccl_engine(const EngineContext& context) {
  require_gpu(context, protocol::backends::kNccl);
  return std::make_unique<BroadcastWeightTransferEngine>(context, "NCCLWeightTransferEngine",
                                                         nccl_communicator_factory(context.device));
}

std::unique_ptr<WeightTransferEngine> make_sparse_nccl_engine(const EngineContext& context) {
  require_gpu(context, protocol::backends::kSparseNccl);
  return std::make_unique<SparseBroadcastWeightTransferEngine>(
      context, "SparseNCCLWeightTransferEngine", nccl_communicator_factory(context.device));
}

}  // namespace hotswap::receiver
