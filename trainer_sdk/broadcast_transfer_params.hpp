// BroadcastTransferParams: what the dense broadcast backends (gloo, nccl) share, with the fields
// and trainer-side defaults of vLLM's NCCLTrainerInitInfo (packed, 1 GiB buffers, 2 in flight).
// The sender ships the wire params to the workers at the handshake, with rank_offset the number
// of broadcasting trainer ranks (1 but for expert and pipeline parallelism).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "protocol/nccl_info.hpp"
#include "protocol/timeouts.hpp"
#include "trainer_sdk/trainer_settings.hpp"

namespace hotswap::trainer_sdk {

struct BroadcastTransferParams {
  std::string master_address;
  int master_port = 0;
  // The group: its broadcasting trainer ranks (rank 0 and each first owner; every trainer rank
  // for held_names() sources) + every inference worker (their get_world_size, summed).
  int world_size = 0;
  bool packed = true;
  std::int64_t packed_buffer_size_bytes = protocol::kDefaultPackedBufferSizeBytes;
  std::int64_t packed_num_buffers = protocol::kDefaultPackedNumBuffers;
  std::chrono::milliseconds timeout{protocol::kDefaultTimeout};  // every wait of the engine
  // How many trainer ranks call trainer_init and send_weights. With owners in the metadata
  // (vLLM 0.34), those ranks broadcast that are a parameter's first owner. Without, 1 is vLLM's
  // layout (rank 0 sends everything, the others only iterate), and more has ranks 0 ..
  // trainer_ranks-1 all join, each parameter sent by the lowest rank whose held_names() hold it
  // (trainer_sdk/rank_holdings.hpp). Rank 0 drives the control calls, one update_weights per
  // broadcaster with its `src`.
  int trainer_ranks = 1;

  // What the sender ships as the workers' init_info: `broadcasters` is its rank_offset.
  protocol::NcclInitInfo worker_init_info(int broadcasters) const;
  // The settings both broadcast backends read beyond the rendezvous.
  void read_settings(const TrainerSettings& s) {
    packed = s.packed;
    packed_buffer_size_bytes = s.packed_buffer_size_bytes;
    timeout = s.timeout;
    trainer_ranks = s.trainer_ranks;
  }
};

}  // namespace hotswap::trainer_sdk
