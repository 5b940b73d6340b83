#include "model_loader/loadable_model.hpp"

#include "protocol/errors.hpp"

namespace hotswap::model_loader {

// Out of line, so the vtable and type info live in exactly one library.
LoadableModel::~LoadableModel() = default;

void LoadableModel::apply_patches(const std::vector<WeightPatch>&) {
  throw protocol::RuntimeError("this model does not take sparse weight patches");
}

}  // namespace hotswap::model_loader
