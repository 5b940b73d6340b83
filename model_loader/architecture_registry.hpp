// ArchitectureRegistry: config.json's `architectures[0]` → the family that reads its config,
// lays out its checkpoint and builds its ServableModel. Each family registers its architectures
// from its own file under model_loader/architectures/ (register_llama_family, ...); builtin()
// holds every family this build has, registered once in architecture_registry.cpp. No libtorch:
// config.json is read without the model code (load_model, in servable_model.hpp, builds one).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_loader/model_config.hpp"
#include "model_loader/weight_mapping.hpp"

namespace hotswap::model_loader {

class ServableModel;
struct ModelOptions;

struct Architecture {
  std::string name;        // config.json's `architectures[0]`: "LlamaForCausalLM"
  std::string model_type;  // config.json's `model_type`, hotswap-make-model's --arch: "llama"
  // What this architecture adds to, or rules over, the fields every config shares (biases, norms,
  // windows): called after those fields are read. A ValueError names the field.
  std::function<void(const nlohmann::json& config, ModelConfig& out)> read_config;
  // The inverse, for writing a config.json back (hotswap-make-model, tests).
  std::function<void(const ModelConfig& config, nlohmann::json& out)> write_config;
  // The checkpoint tensors of a model of this config, and the runtime parameters they fill on
  // one tensor-parallel rank (the whole model at tp = 1). A ValueError when the config cannot
  // be split that many ways.
  std::function<WeightMapping(const ModelConfig& config, TensorParallelRank tp)> weight_mapping;
  // A model with uninitialized weights; load_checkpoint or a complete reload fills them.
  std::function<std::shared_ptr<ServableModel>(const ModelConfig&, const ModelOptions&)> create;
};

class ArchitectureRegistry {
 public:
  // ValueError when `name` or `model_type` is taken.
  void add(Architecture architecture);

  // ValueError naming `name` and listing the supported ones when it is not registered.
  const Architecture& find(std::string_view name) const;
  const Architecture& find_by_model_type(std::string_view model_type) const;
  std::vector<std::string> names() const;
  const std::vector<Architecture>& all() const { return architectures_; }

  // Every architecture of this build.
  static const ArchitectureRegistry& builtin();

 private:
  std::vector<Architecture> architectures_;
};

}  // namespace hotswap::model_loader
