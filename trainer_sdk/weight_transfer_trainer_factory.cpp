#include "trainer_sdk/weight_transfer_trainer_factory.hpp"

#include "protocol/plugin_registry.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/disk_trainer_engine.hpp"
#include "trainer_sdk/ipc_trainer_engine.hpp"
#include "trainer_sdk/shm_trainer_engine.hpp"
#include "trainer_sdk/sparse_trainer_engine.hpp"

namespace hotswap::trainer_sdk {
namespace {

using Registry = protocol::PluginRegistry<WeightTransferTrainerFactory::CreatorSignature>;

// The built-in trainer engines are registered when the registry is first used.
Registry& registry() {
  static Registry instance("Weight transfer trainer engine", "trainer engines");
  static const bool builtins_registered = [] {
    instance.register_engine(std::string(GlooTrainerInitInfo::backend),
                             WeightTransferTrainerFactory::creator_for<BroadcastTrainerEngine>());
    instance.register_engine(std::string(DiskTrainerInitInfo::backend),
                             WeightTransferTrainerFactory::creator_for<DiskTrainerEngine>());
    instance.register_engine(std::string(ShmTrainerInitInfo::backend),
                             WeightTransferTrainerFactory::creator_for<ShmTrainerEngine>());
    instance.register_engine(std::string(SparseGlooTrainerInitInfo::backend),
                             WeightTransferTrainerFactory::creator_for<SparseTrainerEngine>());
    instance.register_engine(std::string(IpcTrainerInitInfo::backend),
                             WeightTransferTrainerFactory::creator_for<IpcTrainerEngine>());
    instance.register_engine(std::string(NcclTrainerInitInfo::backend),
                             WeightTransferTrainerFactory::creator_for<NcclTrainerEngine>());
    instance.register_engine(std::string(SparseNcclTrainerInitInfo::backend),
                             WeightTransferTrainerFactory::creator_for<SparseNcclTrainerEngine>());
    return true;
  }();
  (void)builtins_registered;
  return instance;
}

}  // namespace

void WeightTransferTrainerFactory::register_engine(const std::string& name, Creator creator) {
  registry().register_engine(name, std::move(creator));
}

void WeightTransferTrainerFactory::register_engine(const std::string& name,
                                                   std::string library_path, std::string symbol) {
  registry().register_engine(name, std::move(library_path), std::move(symbol));
}

std::unique_ptr<TrainerWeightTransferEngine> WeightTransferTrainerFactory::trainer_init(
    const TrainerInitInfo& init_info, std::shared_ptr<WeightSyncClient> client,
    std::shared_ptr<WeightSource> source) {
  std::string backend(init_info.backend_name());
  if (backend.empty()) {
    // The runtime twin of TrainerInitInfoFor's static_assert, for a subclass that implemented
    // backend_name() by hand.
    throw protocol::ValueError(init_info_type_name(init_info) +
                               " must set a class-level `backend` string (the "
                               "WeightTransferTrainerFactory registry key).");
  }
  auto creator = registry().resolve(backend);
  auto engine = creator(init_info, std::move(client), std::move(source));
  if (!engine) {
    throw protocol::RuntimeError("the creator of trainer engine '" + backend +
                                 "' returned no engine");
  }
  return engine;
}

bool WeightTransferTrainerFactory::is_registered(const std::string& name) {
  return registry().contains(name);
}

std::vector<std::string> WeightTransferTrainerFactory::registered_backends() {
  return registry().names();
}

}  // namespace hotswap::trainer_sdk
