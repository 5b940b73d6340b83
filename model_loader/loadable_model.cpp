#include "model_loader/loadable_model.hpp"

#include "model_loader/checkpoint.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader {

// Out of line, so the vtable and type info live in exactly one library.
LoadableModel::~LoadableModel() = default;

void LoadableModel::load_weights_from(const Checkpoint& checkpoint) {
  // One call with every tensor: the model validates the whole checkpoint before it writes.
  std::vector<NamedTensor> weights;
  weights.reserve(checkpoint.names().size());
  for (const auto& name : checkpoint.names())
    weights.emplace_back(name, checkpoint.tensor(name));
  load_weights(weights);
}

void LoadableModel::apply_patches(const std::vector<WeightPatch>&) {
  throw protocol::RuntimeError("this model does not take sparse weight patches");
}

void LoadableModel::check_patches(const std::vector<WeightPatch>&) const {
  throw protocol::RuntimeError("this model does not take sparse weight patches");
}

std::optional<at::Tensor> LoadableModel::destination_for(const std::string&, c10::ScalarType,
                                                         c10::IntArrayRef) {
  return std::nullopt;
}

std::optional<at::Tensor> LoadableModel::contiguous_destination(
    const std::vector<protocol::ParamMeta>&, std::uint64_t) {
  return std::nullopt;
}

void LoadableModel::mark_received(const std::string& name) {
  throw protocol::RuntimeError("mark_received('" + name + "') without a destination_for it");
}

}  // namespace hotswap::model_loader
