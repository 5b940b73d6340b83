// NcclTrainerInitInfo: the `nccl` backend's trainer side, vLLM's own, from a GPU of this trainer
// (BroadcastTransferParams says what it shares with `gloo`).
#pragma once

#include <array>
#include <string>
#include <utility>

#include "protocol/backend_names.hpp"
#include "trainer_sdk/broadcast_transfer_params.hpp"
#include "trainer_sdk/trainer_init_info.hpp"
#include "trainer_sdk/trainer_settings.hpp"

namespace hotswap::trainer_sdk {

struct NcclTrainerInitInfo : TrainerInitInfoFor<NcclTrainerInitInfo>, BroadcastTransferParams {
  static constexpr std::string_view backend = protocol::backends::kNccl;

  NcclTrainerInitInfo(std::string master_address, int master_port, int world_size, int rank)
      : TrainerInitInfoFor(rank),
        BroadcastTransferParams{std::move(master_address), master_port, world_size} {}

  int device = 0;  // the CUDA device this trainer sends from
  // Mint the id and ship it as `nccl_unique_id_b64` instead of hosting a TCPStore (vLLM's
  // rendezvous for torch-free peers; master_address and master_port are then unused).
  bool use_unique_id = false;

  static constexpr std::array settings_read = {
      settings::kMasterAddress, settings::kMasterPort, settings::kTrainerRanks, settings::kPacked,
      settings::kBufferSize,    settings::kDevice,     settings::kNcclUniqueId};
  static NcclTrainerInitInfo from_settings(const TrainerSettings& s) {
    NcclTrainerInitInfo info(s.master_address, s.master_port, s.world_size, s.rank);
    info.read_settings(s);
    info.device = s.device;
    info.use_unique_id = s.use_nccl_unique_id;
    return info;
  }
};

}  // namespace hotswap::trainer_sdk
