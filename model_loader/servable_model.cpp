#include "model_loader/servable_model.hpp"

#include "model_loader/architecture_registry.hpp"
#include "model_loader/lora/lora_adapter.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader {

at::Tensor checked_step_tokens(const at::Tensor& tokens, const std::vector<ForwardSlice>& slices,
                               std::int64_t vocab_size) {
  std::int64_t total = 0;
  for (const auto& s : slices) {
    if (s.cache == nullptr || s.num_tokens <= 0) {
      throw protocol::ValueError("every forward slice needs a cache and at least one token");
    }
    total += s.num_tokens;
  }
  at::Tensor ids = tokens.to(at::kLong);
  if (total != ids.numel()) {
    throw protocol::ValueError("forward: slices cover " + std::to_string(total) + " tokens but " +
                               std::to_string(ids.numel()) + " were given");
  }
  if (ids.numel() > 0 &&
      (ids.min().item<std::int64_t>() < 0 || ids.max().item<std::int64_t>() >= vocab_size)) {
    throw protocol::ValueError("token ids must be in 0.." + std::to_string(vocab_size - 1));
  }
  return ids;
}

// Out of line, so the vtable and type info live in exactly one library.
ServableModel::~ServableModel() = default;

std::shared_ptr<const LoraAdapter> ServableModel::load_lora_adapter(
    const std::filesystem::path& directory, std::int64_t max_rank) const {
  const WeightMapping* mapping = weight_mapping();
  if (mapping == nullptr) {
    throw protocol::ValueError("cannot load the LoRA adapter in " + directory.string() +
                               ": this model takes no LoRA adapters");
  }
  return LoraAdapter::load(directory, *mapping, device(), max_rank);
}

std::shared_ptr<ServableModel> load_model(const std::filesystem::path& directory,
                                          const ModelOptions& options) {
  auto config = ModelConfig::load(directory);
  auto checkpoint = Checkpoint::open(directory);
  auto model = ArchitectureRegistry::builtin().find(config.architecture).create(config, options);
  model->load_checkpoint(checkpoint);
  return model;
}

}  // namespace hotswap::model_loader
