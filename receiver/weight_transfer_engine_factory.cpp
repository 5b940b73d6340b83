#include "receiver/weight_transfer_engine_factory.hpp"

#include "protocol/backend_names.hpp"
#include "protocol/plugin_registry.hpp"
#include "receiver/broadcast_engine.hpp"
#include "receiver/disk_engine.hpp"
#include "receiver/ipc_engine.hpp"
#include "receiver/nccl_engine.hpp"
#include "receiver/shm_engine.hpp"
#include "receiver/sparse_broadcast_engine.hpp"

namespace hotswap::receiver {
namespace {

namespace backends = protocol::backends;
using Registry = protocol::PluginRegistry<WeightTransferEngineFactory::CreatorSignature>;

// The built-in engines are registered when the registry is first used, as vLLM registers its
// own at import.
Registry& registry() {
  static Registry instance("Weight transfer engine", "engines");
  static const bool builtins_registered = [] {
    instance.register_engine(std::string(backends::kDisk), [](const EngineContext& context) {
      return std::unique_ptr<WeightTransferEngine>(
          std::make_unique<DiskWeightTransferEngine>(context));
    });
    instance.register_engine(std::string(backends::kGloo), make_gloo_engine);
    instance.register_engine(std::string(backends::kIpc), make_ipc_engine);
    instance.register_engine(std::string(backends::kNccl), make_nccl_engine);
    instance.register_engine(std::string(backends::kSparseNccl), make_sparse_nccl_engine);
    instance.register_engine(std::string(backends::kSparseGloo), make_sparse_gloo_engine);
    instance.register_engine(std::string(backends::kShm), [](const EngineContext& context) {
      return std::unique_ptr<WeightTransferEngine>(
          std::make_unique<ShmWeightTransferEngine>(context));
    });
    return true;
  }();
  (void)builtins_registered;
  return instance;
}

}  // namespace

void WeightTransferEngineFactory::register_engine(const std::string& name, Creator creator) {
  registry().register_engine(name, std::move(creator));
}

void WeightTransferEngineFactory::register_engine(const std::string& name, std::string library_path,
                                                  std::string symbol) {
  registry().register_engine(name, std::move(library_path), std::move(symbol));
}

std::unique_ptr<WeightTransferEngine> WeightTransferEngineFactory::create_engine(
    const EngineContext& context) {
  auto creator = registry().resolve(context.config.backend);
  auto engine = creator(context);
  if (!engine) {
    throw protocol::RuntimeError("the creator of weight transfer engine '" +
                                 context.config.backend + "' returned no engine");
  }
  return engine;
}

bool WeightTransferEngineFactory::is_registered(const std::string& name) {
  return registry().contains(name);
}

std::vector<std::string> WeightTransferEngineFactory::registered_backends() {
  return registry().names();
}

}  // namespace hotswap::receiver
