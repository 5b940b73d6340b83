// Every architecture family hotswap serves, one line each in HOTSWAP_ARCHITECTURE_FAMILIES. A
// family `f` lives in its own files under architectures/, which the CMake lists pick up by name:
//   f_family.cpp  void register_f_family(ArchitectureRegistry&): its architectures, their
//                 config.json rules and checkpoint layout. No libtorch (the fuzz targets build it).
//   f_model.cpp   std::shared_ptr<ServableModel> create_f_model(const ModelConfig&,
//                 const ModelOptions&): its forward, composed of blocks/.
// ArchitectureRegistry::builtin() registers every family of the list, and the fuzz build, which
// has no libtorch, stands in for every create function from the same list.
#pragma once

#include <memory>

#define HOTSWAP_ARCHITECTURE_FAMILIES(FAMILY) FAMILY(llama)

namespace hotswap::model_loader {

class ArchitectureRegistry;
class ServableModel;
struct ModelConfig;
struct ModelOptions;

#define HOTSWAP_DECLARE_ARCHITECTURE_FAMILY(f)                                 \
  void register_##f##_family(ArchitectureRegistry& registry);                  \
  std::shared_ptr<ServableModel> create_##f##_model(const ModelConfig& config, \
                                                    const ModelOptions& options);
HOTSWAP_ARCHITECTURE_FAMILIES(HOTSWAP_DECLARE_ARCHITECTURE_FAMILY)
#undef HOTSWAP_DECLARE_ARCHITECTURE_FAMILY

}  // namespace hotswap::model_loader
