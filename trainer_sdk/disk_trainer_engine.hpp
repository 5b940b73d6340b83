// DiskTrainerEngine: the trainer side of vLLM's shared-disk backend. Each round writes the
// source as a Hugging Face checkpoint (safetensors, written to a temporary name and renamed, so
// a worker never sees half a file) under `directory`, then drives start → update({"path"}) →
// finish. The previous round's checkpoint is removed once the next one has landed.
#pragma once

#include <filesystem>
#include <memory>

#include <array>
#include <chrono>

#include "protocol/backend_names.hpp"
#include "protocol/timeouts.hpp"
#include "trainer_sdk/trainer_init_info.hpp"
#include "trainer_sdk/trainer_settings.hpp"
#include "trainer_sdk/trainer_weight_transfer_engine.hpp"

namespace hotswap::trainer_sdk {

struct DiskTrainerInitInfo : TrainerInitInfoFor<DiskTrainerInitInfo> {
  static constexpr std::string_view backend = protocol::backends::kDisk;
  DiskTrainerInitInfo(std::filesystem::path directory, int rank)
      : TrainerInitInfoFor(rank), directory(std::move(directory)) {}
  std::filesystem::path directory;  // shared with the workers; absolute
  std::chrono::milliseconds timeout{protocol::kDefaultTimeout};  // for each control call

  static constexpr std::array settings_read = {settings::kDiskDir};
  static DiskTrainerInitInfo from_settings(const TrainerSettings& s) {
    // Empty stays empty: never silently the working directory.
    DiskTrainerInitInfo info(
        s.disk_dir.empty() ? s.disk_dir : std::filesystem::absolute(s.disk_dir), s.rank);
    info.timeout = s.timeout;
    return info;
  }
};

class DiskTrainerEngine : public TrainerWeightTransferEngine {
 public:
  using InitInfo = DiskTrainerInitInfo;
  static std::unique_ptr<DiskTrainerEngine> trainer_init(const DiskTrainerInitInfo& info,
                                                         std::shared_ptr<WeightSyncClient> client,
                                                         std::shared_ptr<WeightSource> source);
  DiskTrainerEngine(std::shared_ptr<WeightSyncClient> client, std::shared_ptr<WeightSource> source,
                    const DiskTrainerInitInfo& info);

  void send_weights() override;

 private:
  DiskTrainerInitInfo info_;
  std::uint64_t round_ = 0;
  std::filesystem::path previous_;
};

}  // namespace hotswap::trainer_sdk
