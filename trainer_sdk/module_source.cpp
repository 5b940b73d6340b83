#include "trainer_sdk/module_source.hpp"

#include <torch/nn/module.h>

#include "protocol/errors.hpp"
#include "trainer_sdk/tensor_list_source.hpp"

namespace hotswap::trainer_sdk {
namespace {

class ParameterStream final : public WeightStream {
 public:
  explicit ParameterStream(std::vector<std::pair<std::string, at::Tensor>> items)
      : items_(std::move(items)) {}
  std::optional<NamedWeight> next() override {
    if (next_ == items_.size()) return std::nullopt;
    auto& [name, tensor] = items_[next_++];
    return NamedWeight{name, tensor.detach()};
  }

 private:
  std::vector<std::pair<std::string, at::Tensor>> items_;
  std::size_t next_ = 0;
};

std::vector<std::pair<std::string, at::Tensor>> parameters_of(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    out.emplace_back(item.key(), item.value());
  }
  return out;
}

}  // namespace

ModuleSource::ModuleSource(std::shared_ptr<torch::nn::Module> module) : module_(std::move(module)) {
  if (!module_) throw protocol::ValueError("ModuleSource needs a module");
}

std::vector<protocol::ParamMeta> ModuleSource::metadata() {
  std::vector<protocol::ParamMeta> out;
  for (const auto& [name, tensor] : parameters_of(*module_)) {
    out.push_back(param_meta_of(name, tensor));
  }
  return out;
}

std::unique_ptr<WeightStream> ModuleSource::iter() {
  return std::make_unique<ParameterStream>(parameters_of(*module_));
}

}  // namespace hotswap::trainer_sdk
