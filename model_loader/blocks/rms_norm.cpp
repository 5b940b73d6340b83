#include "model_loader/blocks/rms_norm.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/rsqrt.h>

namespace hotswap::model_loader {

at::Tensor rms_norm(const BlockContext& ctx, const at::Tensor& x, std::size_t weight, double eps) {
  at::Tensor h = x.to(at::kFloat);
  at::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * at::rsqrt(variance + eps);
  return ctx.store[weight].value.to(x.scalar_type()) * h.to(x.scalar_type());
}

}  // namespace hotswap::model_loader
