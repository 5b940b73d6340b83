#include "model_loader/parameter_store.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <utility>

namespace hotswap::model_loader {

ParameterStore::ParameterStore(const WeightMapping& mapping, c10::ScalarType dtype,
                               c10::Device device, bool quantize_int8)
    : mapping_(mapping), dtype_(dtype), device_(device), quantize_int8_(quantize_int8) {
  const auto& params = mapping_.runtime_params();
  tensors_.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto options = at::TensorOptions().device(device_);
    if (quantized(i)) {
      tensors_[i].value = at::empty(params[i].shape, options.dtype(at::kChar));
      tensors_[i].scale = at::empty({params[i].shape[0]}, options.dtype(at::kFloat));
    } else {
      tensors_[i].value = at::empty(params[i].shape, options.dtype(dtype_));
    }
  }
}

at::Tensor ParameterStore::take_spare(std::size_t param) {
  {
    std::lock_guard lock(spares_mutex_);
    if (spares_.size() > param && spares_[param].defined())
      return std::exchange(spares_[param], {});
  }
  std::shared_lock lock(mutex_);
  return at::empty_like(tensors_[param].value);
}

void ParameterStore::set_spare(std::size_t param, at::Tensor tensor) {
  std::lock_guard lock(spares_mutex_);
  if (spares_.size() <= param) spares_.resize(tensors_.size());
  spares_[param] = std::move(tensor);
}

bool ParameterStore::quantized(std::size_t param) const {
  return quantize_int8_ && mapping_.runtime_params()[param].quantizable;
}

std::uint64_t ParameterStore::nbytes() const {
  std::uint64_t total = 0;
  for (const auto& t : tensors_) {
    total += t.value.nbytes();
    if (t.scale.defined()) total += t.scale.nbytes();
  }
  return total;
}

}  // namespace hotswap::model_loader
