#include "model_loader/int8_quantization.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/round.h>

namespace hotswap::model_loader {

QuantizedWeight quantize_int8_per_channel(const at::Tensor& weight) {
  at::Tensor w = weight.to(at::kFloat);
  at::Tensor scale = at::clamp(at::amax(at::abs(w), {1}), 1e-8) / 127.0;
  at::Tensor values = at::clamp(at::round(w / scale.unsqueeze(1)), -127, 127).to(at::kChar);
  return {values, scale};
}

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& values, const at::Tensor& scale) {
  return at::matmul(x, values.to(x.scalar_type()).t()) * scale.to(x.scalar_type());
}

}  // namespace hotswap::model_loader
