// The linear layers every family is made of, over the runtime's parameters (plain, int8 or
// LoRA-adapted): column-parallel (each rank's slice of the outputs) and row-parallel (each rank's
// partial product, summed over the ranks).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <optional>

#include "model_loader/blocks/block_context.hpp"
#include "model_loader/lora/lora_batch.hpp"

namespace hotswap::model_loader {

// x Wᵀ in x's dtype, or in `out` (logits: float32, never rounded to bfloat16 first).
at::Tensor linear(const BlockContext& ctx, const at::Tensor& x, std::size_t param,
                  std::optional<c10::ScalarType> out = std::nullopt);
// linear(x, param) + bias (kNoParam: none), rounded once; then the step's LoRA updates.
at::Tensor linear_with_bias(const BlockContext& ctx, const at::Tensor& x, std::size_t param,
                            std::size_t bias, const LoraBatch& lora);
// A row-parallel layer (o_proj, down_proj): each rank's partial product in float32 with its
// partial LoRA update, summed over the ranks, then the bias, rounded once. linear_with_bias at
// tp = 1.
at::Tensor row_parallel(const BlockContext& ctx, const at::Tensor& x, std::size_t param,
                        std::size_t bias, const LoraBatch& lora);

}  // namespace hotswap::model_loader
