#include "model_loader/blocks/linear_layers.hpp"

#include <ATen/TensorOperators.h>

#include "model_loader/int8_quantization.hpp"
#include "model_loader/linear.hpp"

namespace hotswap::model_loader {

at::Tensor linear(const BlockContext& ctx, const at::Tensor& x, std::size_t param,
                  std::optional<c10::ScalarType> out) {
  const auto& t = ctx.store[param];
  if (t.scale.defined()) {
    at::Tensor y = int8_linear(x, t.value, t.scale);
    return out ? y.to(*out) : y;
  }
  return apply_linear(x, t.value, out);
}

// The bias joins the float32 product before the one rounding to x's dtype, as one fused
// addmm (transformers' F.linear) computes it, rather than after it.
// The base layer's output rounded as without an adapter, then the LoRA update added in float32
// and rounded again: PEFT's order (its base layer's result plus lora_B(lora_A(x)) · scaling), and
// the base layer keeps its fastest kernel (a float32 product of a bfloat16 model takes another).
at::Tensor linear_with_bias(const BlockContext& ctx, const at::Tensor& x, std::size_t param,
                            std::size_t bias, const LoraBatch& lora) {
  at::Tensor y;
  if (bias == kNoParam) {
    y = linear(ctx, x, param);
  } else {
    y = (linear(ctx, x, param, at::kFloat) + ctx.store[bias].value.to(at::kFloat))
            .to(x.scalar_type());
  }
  lora.add_updates(y, x, param);
  return y;
}

at::Tensor row_parallel(const BlockContext& ctx, const at::Tensor& x, std::size_t param,
                        std::size_t bias, const LoraBatch& lora) {
  if (ctx.tp.size == 1) return linear_with_bias(ctx, x, param, bias, lora);
  at::Tensor y = linear(ctx, x, param, at::kFloat);
  // (x_r A_rᵀ) Bᵀ summed over the ranks is (x Aᵀ) Bᵀ: each rank adds its part before the sum.
  lora.add_updates(y, x, param);
  ctx.queue_all_reduce(y);
  if (bias != kNoParam) y = y + ctx.store[bias].value.to(at::kFloat);
  return y.to(x.scalar_type());
}

}  // namespace hotswap::model_loader
