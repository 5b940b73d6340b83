// TrainerSettings: what a launcher (hotswap-trainer's flags, a job script) says about a transfer
// in words every backend shares. Each backend's init info declares, beside its fields, the
// settings it reads (`settings_read`, by the names of hotswap-trainer's flags) and how it is built
// from them (`from_settings`); WeightTransferTrainerFactory finds both by backend name. So a
// launcher builds any backend's init info with no branch by name, and refuses a setting the
// chosen backend would ignore, naming the backends that read it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "protocol/nccl_info.hpp"
#include "protocol/timeouts.hpp"

namespace hotswap::trainer_sdk {

class SharedWeightArena;

// The optional settings, named as hotswap-trainer's flags (without "--"). The settings every
// backend reads (rank, world size, workers, timeout) have no name: they are always given.
namespace settings {
inline constexpr std::string_view kMasterAddress = "master-address";
inline constexpr std::string_view kMasterPort = "master-port";
inline constexpr std::string_view kTrainerRanks = "ranks";
inline constexpr std::string_view kDevice = "device";
inline constexpr std::string_view kPacked = "packed";
inline constexpr std::string_view kBufferSize = "buffer-size";
inline constexpr std::string_view kNcclUniqueId = "nccl-unique-id";
inline constexpr std::string_view kShmArena = "shm-arena";
inline constexpr std::string_view kShmWindow = "shm-window";
inline constexpr std::string_view kDiskDir = "disk-dir";
}  // namespace settings

struct TrainerSettings {
  int rank = 0;
  // The broadcast group: the broadcasting trainer ranks and every inference rank.
  int world_size = 0;
  int num_workers = 1;  // control endpoints, each read by a `shm` chunk
  std::chrono::milliseconds timeout{protocol::kDefaultTimeout};
  // Read by the backends that name them in `settings_read`.
  std::string master_address = "127.0.0.1";
  int master_port = 0;
  int trainer_ranks = 1;
  int device = 0;
  bool packed = true;
  std::int64_t packed_buffer_size_bytes = protocol::kDefaultPackedBufferSizeBytes;
  bool use_nccl_unique_id = false;
  std::shared_ptr<SharedWeightArena> shm_arena;
  bool shm_window = false;
  std::filesystem::path disk_dir;  // the disk backend makes it absolute
};

}  // namespace hotswap::trainer_sdk
