// The gated MLP of a dense layer: SiLU(x Wgᵀ) ⊙ (x Wuᵀ), then the down projection, with the gate
// and up projections fused into one column-parallel gate_up_proj (vLLM's layout) and the down
// projection row-parallel.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>

#include "model_loader/blocks/block_context.hpp"
#include "model_loader/lora/lora_batch.hpp"

namespace hotswap::model_loader {

// `intermediate`: this rank's width of the intermediate activations.
at::Tensor gated_mlp(const BlockContext& ctx, const at::Tensor& x, std::size_t gate_up,
                     std::size_t down, std::int64_t intermediate, const LoraBatch& lora);

// SiLU(gate) ⊙ up over the two halves of `gate_up` [tokens, 2 intermediate].
at::Tensor silu_and_mul(const at::Tensor& gate_up, std::int64_t intermediate);

}  // namespace hotswap::model_loader
