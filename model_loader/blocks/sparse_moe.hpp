// The sparse mixture-of-experts MLP of a layer (Qwen3-MoE, Mixtral): a router picks each token's
// top k experts, each a gated MLP whose gate and up projections are fused into w13 and whose down
// projection is w2 (vLLM's FusedMoE layout, one tensor of every expert each). With tensor
// parallelism each rank runs its slice of every expert's width, or, with expert parallelism, its
// own experts whole; the ranks sum.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

#include "model_loader/blocks/block_context.hpp"
#include "model_loader/model_config.hpp"

namespace hotswap::model_loader {

struct SparseMoeParams {
  std::size_t router, w13, w2;
};

// On the normalized hidden states `x` [tokens, hidden]; the experts' count, k, widths and routing
// rules come from `config`.
at::Tensor sparse_moe(const BlockContext& ctx, const at::Tensor& x, const SparseMoeParams& params,
                      const ModelConfig& config);

}  // namespace hotswap::model_loader
