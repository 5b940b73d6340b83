#include "receiver/nccl_engine.hpp"

#include <algorithm>

#include "protocol/errors.hpp"
#include "receiver/sparse_broadcast_engine.hpp"
#include "transport/nccl_unique_id.hpp"
#include "transport/rendezvous_store.hpp"
#ifdef HOTSWAP_WITH_CUDA
#include "transport/nccl_communicator.hpp"
#endif

namespace hotswap::receiver {
namespace {

// Where an NCCL backend can run at all; otherwise what to change, said at start.
void require_gpu(const EngineContext& context, const char* backend) {
#ifndef HOTSWAP_WITH_CUDA
  (void)context;
  throw protocol::ValueError(std::string("the ") + backend +
                             " backend needs a GPU build of hotswap; this one was built without "
                             "CUDA and NCCL (configure with -DHOTSWAP_WITH_CUDA=ON on a machine "
                             "that has them)");
#else
  if (!context.device.is_cuda()) {
    throw protocol::ValueError(std::string("the ") + backend +
                               " backend moves weights between GPUs, but this worker runs on " +
                               context.device.str() + "; start it with --device cuda:N");
  }
#endif
}

}  // namespace

BroadcastWeightTransferEngine::CommunicatorFactory nccl_communicator_factory(c10::Device device) {
  return [device](const protocol::NcclInitInfo& info, int rank,
                  std::chrono::milliseconds timeout) -> std::unique_ptr<transport::Communicator> {
    transport::NcclUniqueId id{};
    std::unique_ptr<transport::RendezvousStore> store;
    if (info.uses_unique_id()) {
      std::copy(info.nccl_unique_id.begin(), info.nccl_unique_id.end(), id.begin());
    } else {
      store = std::make_unique<transport::RendezvousStore>(
          transport::Rendezvous{*info.master_address, static_cast<int>(*info.master_port), rank,
                                static_cast<int>(info.world_size), timeout});
      id = transport::unique_id_from_pickle(store->get(transport::stateless_broadcast_key(0, 0)));
    }
#ifdef HOTSWAP_WITH_CUDA
    return std::make_unique<transport::NcclCommunicator>(
        transport::NcclSetup{id, rank, static_cast<int>(info.world_size), device.index(), timeout},
        std::move(store));
#else
    (void)device;
    throw protocol::ValueError("NCCL communicators need a GPU build of hotswap");
#endif
  };
}

std::unique_ptr<WeightTransferEngine> make_nccl_engine(const EngineContext& context) {
  require_gpu(context, "nccl");
  return std::make_unique<BroadcastWeightTransferEngine>(context, "NCCLWeightTransferEngine",
                                                         nccl_communicator_factory(context.device));
}

std::unique_ptr<WeightTransferEngine> make_sparse_nccl_engine(const EngineContext& context) {
  require_gpu(context, "sparse_nccl");
  return std::make_unique<SparseBroadcastWeightTransferEngine>(
      context, "SparseNCCLWeightTransferEngine", nccl_communicator_factory(context.device));
}

}  // namespace hotswap::receiver
