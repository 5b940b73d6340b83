#include "model_loader/servable_model.hpp"

#include "model_loader/architecture_registry.hpp"

namespace hotswap::model_loader {

// Out of line, so the vtable and type info live in exactly one library.
ServableModel::~ServableModel() = default;

std::shared_ptr<ServableModel> load_model(const std::filesystem::path& directory,
                                          const ModelOptions& options) {
  auto config = ModelConfig::load(directory);
  auto checkpoint = Checkpoint::open(directory);
  auto model = ArchitectureRegistry::builtin().find(config.architecture).create(config, options);
  model->load_checkpoint(checkpoint);
  return model;
}

}  // namespace hotswap::model_loader
