// How a trainer's sender opens its transfer group as rank 0, shared by the dense and sparse
// broadcast engines on both transports:
//
// - gloo: host the TCPStore at master_address:master_port and join ProcessGroupGloo;
// - NCCL, TCP mode (vLLM's stock rendezvous): host the TCPStore, mint an ncclUniqueId and store
//   its pickle under `broadcast_from/0/0`, exactly as vLLM's trainer does, so hotswap and vLLM
//   workers can both join;
// - NCCL, unique-id mode: mint the id and ship it as `nccl_unique_id_b64` (no store at all).
//
// In every case the workers' init_weight_transfer_engine runs on a side thread while this
// thread rendezvouses, since both must meet; a failure the workers already reported is raised
// in preference to the group's own, being the better diagnosis.
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <memory>

#include "protocol/nccl_info.hpp"
#include "trainer_sdk/weight_sync_client.hpp"
#include "transport/communicator.hpp"

namespace hotswap::trainer_sdk {

struct SenderGroup {
  enum class Kind { kGloo, kNccl };
  Kind kind = Kind::kGloo;
  int device = 0;               // NCCL: the CUDA device this trainer sends from
  bool nccl_unique_id = false;  // NCCL: ship a minted id instead of hosting a TCPStore

  // Where tensors must be to be sent: the CPU for gloo, the GPU for NCCL.
  c10::Device tensor_device() const;
};

// `worker_init_info` carries the TCP fields; in unique-id mode they are replaced by the id.
std::unique_ptr<transport::Communicator> open_group_as_sender(
    const std::shared_ptr<WeightSyncClient>& client, protocol::NcclInitInfo worker_init_info,
    const SenderGroup& group, std::chrono::milliseconds timeout);

// A trainer rank other than 0, when every trainer rank joins the group (worker_init_info's
// rank_offset counts them): it meets rank 0's TCPStore as the workers do, without a control
// call. NCCL's unique-id mode has no store to meet at: a ValueError.
std::unique_ptr<transport::Communicator> open_group_as_member(
    const protocol::NcclInitInfo& worker_init_info, int rank, const SenderGroup& group,
    std::chrono::milliseconds timeout);

}  // namespace hotswap::trainer_sdk
