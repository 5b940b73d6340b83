// The self-attention sublayer of a decoder layer: the fused column-parallel qkv projection (with
// its bias where the family has one), per-head RMSNorm of queries and keys (Qwen3), the rotary
// embedding, the step's keys and values written to the layer's KV blocks, paged attention over
// each sequence's cache (causal, sliding window, grouped-query), and the row-parallel output
// projection.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>

#include "model_loader/blocks/block_context.hpp"
#include "model_loader/blocks/step_inputs.hpp"
#include "model_loader/kv_block_pool.hpp"
#include "model_loader/model_config.hpp"

namespace hotswap::model_loader {

// A layer's attention parameters; kNoParam for what it lacks.
struct SelfAttentionParams {
  std::size_t qkv, qkv_bias, o, o_bias, q_norm, k_norm;
};

// This rank's share of the heads, and the dtype attention's two matmuls run in.
struct SelfAttentionShape {
  std::int64_t heads, kv_heads, head_dim;
  c10::ScalarType compute;
};

// On the normalized hidden states `x` [tokens, hidden], for `layer` of `pool`; `config` gives the
// norm's epsilon and the sliding window.
at::Tensor self_attention(const BlockContext& ctx, const at::Tensor& x,
                          const SelfAttentionParams& params, const SelfAttentionShape& shape,
                          const ModelConfig& config, const KvBlockPool& pool, int layer,
                          const StepInputs& step);

}  // namespace hotswap::model_loader
