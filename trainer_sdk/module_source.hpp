// ModuleSource: a WeightSource over `torch::nn::Module::named_parameters()`, the common case.
// Metadata reads each parameter's dtype and shape; iteration yields the parameters themselves
// (detached views of the live storage, so nothing is copied until a backend sends it).
#pragma once

#include <memory>

#include "trainer_sdk/weight_source.hpp"

namespace torch::nn {
class Module;
}

namespace hotswap::trainer_sdk {

class ModuleSource : public WeightSource {
 public:
  explicit ModuleSource(std::shared_ptr<torch::nn::Module> module);

  std::vector<protocol::ParamMeta> metadata() override;
  std::unique_ptr<WeightStream> iter() override;

 private:
  std::shared_ptr<torch::nn::Module> module_;
};

}  // namespace hotswap::trainer_sdk
