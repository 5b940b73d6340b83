#include "model_loader/blocks/gated_mlp.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/silu.h>

#include "model_loader/blocks/linear_layers.hpp"

namespace hotswap::model_loader {

at::Tensor silu_and_mul(const at::Tensor& gate_up, std::int64_t intermediate) {
  return at::silu(gate_up.narrow(1, 0, intermediate)) *
         gate_up.narrow(1, intermediate, intermediate);
}

at::Tensor gated_mlp(const BlockContext& ctx, const at::Tensor& x, std::size_t gate_up,
                     std::size_t down, std::int64_t intermediate, const LoraBatch& lora) {
  at::Tensor m = silu_and_mul(linear_with_bias(ctx, x, gate_up, kNoParam, lora), intermediate);
  return row_parallel(ctx, m, down, kNoParam, lora);
}

}  // namespace hotswap::model_loader
