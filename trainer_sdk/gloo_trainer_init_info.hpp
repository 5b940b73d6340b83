// GlooTrainerInitInfo: the trainer side of the `gloo` backend, the same fields as vLLM's
// NCCLTrainerInitInfo (and the same trainer-side defaults: packed, 1 GiB buffers, 2 in flight).
// The sender ships the wire params to the worker at the handshake with rank_offset 1.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "protocol/nccl_info.hpp"
#include "trainer_sdk/trainer_init_info.hpp"

namespace hotswap::trainer_sdk {

struct GlooTrainerInitInfo : TrainerInitInfoFor<GlooTrainerInitInfo> {
  static constexpr std::string_view backend = "gloo";

  GlooTrainerInitInfo(std::string master_address, int master_port, int world_size, int rank)
      : TrainerInitInfoFor(rank),
        master_address(std::move(master_address)),
        master_port(master_port),
        world_size(world_size) {}

  std::string master_address;
  int master_port;
  int world_size;  // this trainer (1) + every inference worker
  bool packed = true;
  std::int64_t packed_buffer_size_bytes = protocol::kDefaultPackedBufferSizeBytes;
  std::int64_t packed_num_buffers = protocol::kDefaultPackedNumBuffers;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // every wait of the engine

  // What the sender ships as the workers' init_info.
  protocol::NcclInitInfo worker_init_info() const;
};

}  // namespace hotswap::trainer_sdk
