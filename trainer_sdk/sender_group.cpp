#include "trainer_sdk/sender_group.hpp"

#include "protocol/base64.hpp"
#include "protocol/errors.hpp"
#include "trainer_sdk/async_call.hpp"
#include "trainer_sdk/round_hook.hpp"
#include "transport/device.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/nccl_communicator.hpp"
#include "transport/nccl_unique_id.hpp"

namespace hotswap::trainer_sdk {

c10::Device SenderGroup::tensor_device() const {
  if (kind == Kind::kGloo) return c10::Device(c10::kCPU);
  return transport::cuda_device(device);
}

std::unique_ptr<transport::Communicator> open_group_as_sender(
    const std::shared_ptr<WeightSyncClient>& client, protocol::NcclInitInfo worker_init_info,
    const SenderGroup& group, std::chrono::milliseconds timeout) {
  if (group.kind == SenderGroup::Kind::kNccl && !transport::built_with_cuda()) {
    transport::throw_needs_gpu_build("NCCL trainer engines need");
  }
  transport::NcclUniqueId id{};
  if (group.kind == SenderGroup::Kind::kNccl) id = transport::new_nccl_unique_id();
  if (group.kind == SenderGroup::Kind::kNccl && group.nccl_unique_id) {
    worker_init_info.master_address.reset();
    worker_init_info.master_port.reset();
    worker_init_info.nccl_unique_id.assign(id.begin(), id.end());
    worker_init_info.nccl_unique_id_b64 = protocol::base64_encode(id);
  }
  const transport::Rendezvous rendezvous{worker_init_info.master_address.value_or(""),
                                         static_cast<int>(worker_init_info.master_port.value_or(0)),
                                         0, static_cast<int>(worker_init_info.world_size), timeout};
  nlohmann::json payload = worker_init_info.to_json();
  AsyncCall init([client, payload] { client->init_weight_transfer_engine(payload); });
  reach(RoundPoint::kInit);
  std::unique_ptr<transport::Communicator> communicator;
  try {
    if (group.kind == SenderGroup::Kind::kGloo) {
      communicator = std::make_unique<transport::GlooCommunicator>(rendezvous);
    } else {
      std::unique_ptr<transport::RendezvousStore> store;
      if (!group.nccl_unique_id) {
        // vLLM's StatelessProcessGroup.broadcast_obj of the id: the group's first broadcast.
        store = std::make_unique<transport::RendezvousStore>(rendezvous);
        store->set(transport::stateless_broadcast_key(0, 0), transport::pickle_unique_id(id));
      }
      communicator = std::make_unique<transport::NcclCommunicator>(
          transport::NcclSetup{id, 0, rendezvous.world_size, group.device, timeout},
          std::move(store));
    }
  } catch (...) {
    init.rethrow_if_failed();
    throw;
  }
  init.wait(timeout, "init_weight_transfer_engine");
  return communicator;
}

std::unique_ptr<transport::Communicator> open_group_as_member(
    const protocol::NcclInitInfo& worker_init_info, int rank, const SenderGroup& group,
    std::chrono::milliseconds timeout) {
  if (group.kind == SenderGroup::Kind::kNccl && group.nccl_unique_id) {
    throw protocol::ValueError("NCCL's unique-id rendezvous has no store for other ranks to meet");
  }
  const transport::Rendezvous rendezvous{*worker_init_info.master_address,
                                         static_cast<int>(*worker_init_info.master_port), rank,
                                         static_cast<int>(worker_init_info.world_size), timeout};
  if (group.kind == SenderGroup::Kind::kGloo) {
    return std::make_unique<transport::GlooCommunicator>(rendezvous);
  }
  return transport::join_nccl_group_through_store(rendezvous, group.device);
}

}  // namespace hotswap::trainer_sdk
