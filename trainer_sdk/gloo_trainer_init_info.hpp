// GlooTrainerInitInfo: the `gloo` backend's trainer side, vLLM's nccl protocol over gloo, on the
// CPU (BroadcastTransferParams says what it shares with `nccl`).
#pragma once

#include <array>
#include <string>
#include <utility>

#include "protocol/backend_names.hpp"
#include "trainer_sdk/broadcast_transfer_params.hpp"
#include "trainer_sdk/trainer_init_info.hpp"
#include "trainer_sdk/trainer_settings.hpp"

namespace hotswap::trainer_sdk {

struct GlooTrainerInitInfo : TrainerInitInfoFor<GlooTrainerInitInfo>, BroadcastTransferParams {
  static constexpr std::string_view backend = protocol::backends::kGloo;

  GlooTrainerInitInfo(std::string master_address, int master_port, int world_size, int rank)
      : TrainerInitInfoFor(rank),
        BroadcastTransferParams{std::move(master_address), master_port, world_size} {}

  static constexpr std::array settings_read = {settings::kMasterAddress, settings::kMasterPort,
                                               settings::kTrainerRanks, settings::kPacked,
                                               settings::kBufferSize};
  static GlooTrainerInitInfo from_settings(const TrainerSettings& s) {
    GlooTrainerInitInfo info(s.master_address, s.master_port, s.world_size, s.rank);
    info.read_settings(s);
    return info;
  }
};

}  // namespace hotswap::trainer_sdk
