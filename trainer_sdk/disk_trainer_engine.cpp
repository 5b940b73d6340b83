#include "trainer_sdk/disk_trainer_engine.hpp"

#include <unistd.h>

#include <map>

#include "model_loader/safetensors_writer.hpp"
#include "protocol/errors.hpp"

namespace hotswap::trainer_sdk {

DiskTrainerEngine::DiskTrainerEngine(std::shared_ptr<WeightSyncClient> client,
                                     std::shared_ptr<WeightSource> source,
                                     const DiskTrainerInitInfo& info)
    : TrainerWeightTransferEngine(std::move(client), std::move(source), info.is_sender()),
      info_(info) {}

std::unique_ptr<DiskTrainerEngine> DiskTrainerEngine::trainer_init(
    const DiskTrainerInitInfo& info, std::shared_ptr<WeightSyncClient> client,
    std::shared_ptr<WeightSource> source) {
  if (!source) throw protocol::ValueError("Disk trainer weight transfer requires a WeightSource.");
  if (!info.directory.is_absolute()) {
    throw protocol::ValueError("the shared directory must be absolute, got '" +
                               info.directory.string() + "'");
  }
  auto engine = std::make_unique<DiskTrainerEngine>(client, source, info);
  if (engine->is_sender()) {
    std::filesystem::create_directories(info.directory);
    init_workers(client, nlohmann::json::object(), info.timeout);
  }
  return engine;
}

void DiskTrainerEngine::send_weights() {
  auto stream = source()->iter();
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  while (auto item = stream->next()) {
    if (item->held()) tensors.emplace_back(item->name, item->tensor);
  }
  if (!is_sender()) return;
  auto dir =
      info_.directory / ("round-" + std::to_string(::getpid()) + "-" + std::to_string(++round_));
  std::filesystem::create_directories(dir);
  model_loader::save_safetensors((dir / "model.safetensors").string(), tensors);
  const nlohmann::json update_info = {{"path", dir.string()}};
  // Every byte is on disk already: the workers read it inside the one update call.
  run_round(round_version(), [&] { update_in_place(update_info, info_.timeout); });
  if (!previous_.empty()) std::filesystem::remove_all(previous_);
  previous_ = dir;
}

}  // namespace hotswap::trainer_sdk
