// The trainer side of a full-resync CPU plane (shm, gloo, disk) as the benches drive it: one
// engine pushing `source` into the worker behind `client`, with the buffer size each bench
// chooses. One place, so that the soak and the serving-through-updates bench push the same way.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "protocol/errors.hpp"
#include "protocol/timeouts.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/disk_trainer_engine.hpp"
#include "trainer_sdk/gloo_trainer_init_info.hpp"
#include "trainer_sdk/shm_trainer_engine.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/gloo_communicator.hpp"

namespace hotswap::bench {

// `buffer_bytes`: the shm ring's and the packed gloo buffer's size (at least the largest tensor
// for shm); `disk_directory`: where a disk engine writes its checkpoints (one per engine).
inline std::unique_ptr<trainer_sdk::TrainerWeightTransferEngine> make_cpu_trainer_engine(
    const std::string& backend, std::shared_ptr<trainer_sdk::WeightSyncClient> client,
    std::shared_ptr<trainer_sdk::WeightSource> source, std::int64_t buffer_bytes,
    const std::filesystem::path& disk_directory,
    std::chrono::milliseconds timeout = protocol::kDefaultTimeout) {
  using trainer_sdk::WeightTransferTrainerFactory;
  if (backend == "shm") {
    trainer_sdk::ShmTrainerInitInfo info(1, 0);
    info.packed_buffer_size_bytes = buffer_bytes;
    info.timeout = timeout;
    return WeightTransferTrainerFactory::trainer_init(info, client, source);
  }
  if (backend == "gloo") {
    trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
    info.packed_buffer_size_bytes = buffer_bytes;
    info.timeout = timeout;
    return WeightTransferTrainerFactory::trainer_init(info, client, source);
  }
  if (backend == "disk") {
    trainer_sdk::DiskTrainerInitInfo info(disk_directory, 0);
    info.timeout = timeout;
    return WeightTransferTrainerFactory::trainer_init(info, client, source);
  }
  throw protocol::ValueError("a bench pushes over shm, gloo or disk here, not '" + backend + "'");
}

}  // namespace hotswap::bench
