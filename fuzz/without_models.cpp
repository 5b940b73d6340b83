// The fuzz build reads config.json through the architecture registry but has no libtorch, so no
// model code: each family's `create` resolves here instead of to its model file. No target
// builds a model; one that tried would stop here, loudly.
#include <cstdio>
#include <cstdlib>

#include "model_loader/architectures/llama_family.hpp"

namespace hotswap::model_loader {

std::shared_ptr<ServableModel> create_llama_model(const ModelConfig&, const ModelOptions&) {
  std::fputs("fuzz build: models are not built without libtorch\n", stderr);
  std::abort();
}

}  // namespace hotswap::model_loader
