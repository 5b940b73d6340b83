#include "model_loader/servable_model.hpp"

namespace hotswap::model_loader {

// Out of line, so the vtable and type info live in exactly one library.
ServableModel::~ServableModel() = default;

}  // namespace hotswap::model_loader
