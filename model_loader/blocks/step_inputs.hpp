// StepInputs: what one forward step prepares before its first layer, alike for every family:
// the tokens checked and on the device, each token's position, the last row of each slice (for a
// step that returns only those), KV blocks for the new positions and the paged-attention plan that
// every layer's attention reads them by, the rotary tables, and the rows each LoRA adapter of the
// step applies to.
//
// Every copy from host memory happens here, before any weight is read or collective queued: such
// a copy waits for the stream, and later in the step the stream waits on queued all-reduces,
// which only finish_collectives() waits for, against the collective timeout.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "model_loader/blocks/rotary_embedding.hpp"
#include "model_loader/kv_block_pool.hpp"
#include "model_loader/lora/lora_batch.hpp"
#include "model_loader/model_config.hpp"
#include "model_loader/paged_attention.hpp"
#include "model_loader/servable_model.hpp"

namespace hotswap::model_loader {

class StepInputs {
 public:
  // `rope`: the family's rotary embedding (null: none). Takes the KV blocks of the step's new
  // positions from `pool` (OverloadedError when it has too few).
  StepInputs(const at::Tensor& tokens, const std::vector<ForwardSlice>& slices, bool all_positions,
             const ModelConfig& config, KvBlockPool& pool, c10::Device device,
             const PagedAttentionLimits& limits, const RotaryEmbedding* rope);

  // After the last layer: each slice's cache holds its new positions.
  static void advance(std::vector<ForwardSlice>& slices);
  // The rows of `h` the step returns: every row, or each slice's last.
  at::Tensor returned_rows(const at::Tensor& h) const;

  std::int64_t num_tokens;
  at::Tensor ids;        // [N] int64, checked against the vocabulary
  at::Tensor positions;  // [N] int64
  at::Tensor last_rows;  // each slice's last row; undefined when every row is returned
  PagedAttentionPlan plan;
  RotaryEmbedding::Tables rope;  // undefined tensors without a rotary embedding
  LoraBatch lora;
};

}  // namespace hotswap::model_loader
