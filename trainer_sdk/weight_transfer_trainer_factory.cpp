#include "trainer_sdk/weight_transfer_trainer_factory.hpp"

#include <map>
#include <mutex>

#include "protocol/plugin_registry.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/disk_trainer_engine.hpp"
#include "trainer_sdk/ipc_trainer_engine.hpp"
#include "trainer_sdk/shm_trainer_engine.hpp"
#include "trainer_sdk/sparse_trainer_engine.hpp"

namespace hotswap::trainer_sdk {
namespace {

using Factory = WeightTransferTrainerFactory;
using Registry = protocol::PluginRegistry<Factory::CreatorSignature>;

// What launchers can configure, by backend, in registration order.
struct SettingsTable {
  std::mutex mutex;
  std::vector<std::pair<std::string, Factory::SettingsSupport>> rows;
};
SettingsTable& settings_table() {
  static SettingsTable table;
  return table;
}

template <class Engine>
void register_builtin(Registry& registry) {
  using Info = typename Engine::InitInfo;
  registry.register_engine(std::string(Info::backend), Factory::creator_for<Engine>());
  auto& table = settings_table();
  std::lock_guard lock(table.mutex);
  table.rows.emplace_back(std::string(Info::backend), Factory::settings_support_for<Info>());
}

// The built-in trainer engines are registered when the registry is first used: a backend is its
// engine's files and one line here.
Registry& registry() {
  static Registry instance("Weight transfer trainer engine", "trainer engines");
  static const bool builtins_registered = [] {
    register_builtin<BroadcastTrainerEngine>(instance);
    register_builtin<DiskTrainerEngine>(instance);
    register_builtin<ShmTrainerEngine>(instance);
    register_builtin<SparseTrainerEngine>(instance);
    register_builtin<IpcTrainerEngine>(instance);
    register_builtin<NcclTrainerEngine>(instance);
    register_builtin<SparseNcclTrainerEngine>(instance);
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

void WeightTransferTrainerFactory::register_settings(const std::string& name,
                                                     SettingsSupport support) {
  registry();  // the built-ins first
  auto& table = settings_table();
  std::lock_guard lock(table.mutex);
  table.rows.emplace_back(name, std::move(support));
}

WeightTransferTrainerFactory::SettingsSupport WeightTransferTrainerFactory::settings_support(
    const std::string& backend) {
  // An unknown backend: the registry's own error, which lists every one there is.
  if (!registry().contains(backend)) registry().resolve(backend);
  auto& table = settings_table();
  std::lock_guard lock(table.mutex);
  for (const auto& [name, support] : table.rows) {
    if (name == backend) return support;
  }
  throw protocol::ValueError("weight transfer backend '" + backend +
                             "' was registered with a creator alone: build its TrainerInitInfo "
                             "in code (its init info declares no settings_read/from_settings)");
}

std::vector<std::string> WeightTransferTrainerFactory::backends_reading(std::string_view setting) {
  registry();
  auto& table = settings_table();
  std::lock_guard lock(table.mutex);
  std::vector<std::string> out;
  for (const auto& [name, support] : table.rows) {
    for (auto read : support.reads) {
      if (read == setting) {
        out.push_back(name);
        break;
      }
    }
  }
  return out;
}

bool WeightTransferTrainerFactory::is_registered(const std::string& name) {
  return registry().contains(name);
}

std::vector<std::string> WeightTransferTrainerFactory::registered_backends() {
  return registry().names();
}

}  // namespace hotswap::trainer_sdk
