#include "model_loader/architecture_registry.hpp"

#include "model_loader/architectures/families.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names)
    out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

void ArchitectureRegistry::add(Architecture architecture) {
  for (const auto& a : architectures_) {
    if (a.name == architecture.name || a.model_type == architecture.model_type) {
      throw protocol::ValueError("architecture '" + architecture.name + "' (model_type '" +
                                 architecture.model_type + "') is already registered");
    }
  }
  architectures_.push_back(std::move(architecture));
}

const Architecture& ArchitectureRegistry::find(std::string_view name) const {
  for (const auto& a : architectures_) {
    if (a.name == name) return a;
  }
  throw protocol::ValueError("architecture '" + std::string(name) +
                             "' is not supported (hotswap serves " + joined(names()) + ")");
}

const Architecture& ArchitectureRegistry::find_by_model_type(std::string_view model_type) const {
  std::vector<std::string> types;
  for (const auto& a : architectures_) {
    if (a.model_type == model_type) return a;
    types.push_back(a.model_type);
  }
  throw protocol::ValueError("unknown architecture '" + std::string(model_type) +
                             "' (expected one of " + joined(types) + ")");
}

std::vector<std::string> ArchitectureRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& a : architectures_)
    out.push_back(a.name);
  return out;
}

const ArchitectureRegistry& ArchitectureRegistry::builtin() {
  // Every family of architectures/families.hpp: its file registers the architectures it serves.
  static const ArchitectureRegistry registry = [] {
    ArchitectureRegistry r;
#define HOTSWAP_REGISTER_FAMILY(f) register_##f##_family(r);
    HOTSWAP_ARCHITECTURE_FAMILIES(HOTSWAP_REGISTER_FAMILY)
#undef HOTSWAP_REGISTER_FAMILY
    return r;
  }();
  return registry;
}

}  // namespace hotswap::model_loader
