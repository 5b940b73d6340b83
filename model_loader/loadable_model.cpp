#include "model_loader/loadable_model.hpp"

namespace hotswap::model_loader {

// Out of line, so the vtable and type info live in exactly one library.
LoadableModel::~LoadableModel() = default;

}  // namespace hotswap::model_loader
