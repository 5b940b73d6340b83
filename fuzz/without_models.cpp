// The fuzz build reads config.json through the architecture registry but has no libtorch, so no
// model code: each family's `create` (model_loader/architectures/families.hpp) resolves here
// instead of to its model file. No target builds a model; one that tried would stop here, loudly.
#include <cstdio>
#include <cstdlib>

#include "model_loader/architectures/families.hpp"

namespace hotswap::model_loader {

#define HOTSWAP_STAND_IN_FOR_MODEL(f)                                                          \
  std::shared_ptr<ServableModel> create_##f##_model(const ModelConfig&, const ModelOptions&) { \
    std::fputs("fuzz build: models are not built without libtorch\n", stderr);                 \
    std::abort();                                                                              \
  }
HOTSWAP_ARCHITECTURE_FAMILIES(HOTSWAP_STAND_IN_FOR_MODEL)
#undef HOTSWAP_STAND_IN_FOR_MODEL

}  // namespace hotswap::model_loader
