// Attention of one forward step over a paged KV cache (KvBlockPool): every sequence of the step
// in one call per layer, with no padding to the longest.
//
// The step's decodes (one new token each) attend together: each (sequence, block) pair is one
// entry of a batched matmul over that block's keys, and a softmax segmented by sequence joins
// the pairs of each sequence, so the work follows the positions each sequence holds. Prefills
// (several new tokens) attend over their own keys, gathered from their blocks, in chunks of
// queries (causal_attention), a few large matmuls each. The indices both need are made once
// per step (PagedAttentionPlan) and serve every layer; nothing in a layer loops over sequences
// on the host but the prefills, whose matmuls dwarf the loop.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "model_loader/kv_cache.hpp"

namespace hotswap::model_loader {

class KvBlockPool;

// One sequence's share of the step: `num_tokens` new tokens at positions start .. start +
// num_tokens - 1 (start: what its cache held before the step), its blocks already reserved.
struct PagedSlice {
  const KvCache* cache = nullptr;
  std::int64_t start = 0;
  std::int64_t num_tokens = 0;
};

struct PagedAttentionPlan {
  // The pool slot each new token's key and value are written to, in row order [tokens].
  at::Tensor slots;

  // Decodes: their rows of the step's queries [decodes]; one entry per (decode, block) pair:
  // which decode, which block, and which of the block's slots it may not see (past its
  // position, or outside the sliding window) [pairs, block_size].
  at::Tensor decode_rows, pair_decode, pair_block, pair_blocked;
  std::int64_t decodes = 0;

  // Prefills: each one's first row, length and start, and the slots of its keys in position
  // order (everything up to its last new token).
  struct Prefill {
    std::int64_t first_row = 0, num_tokens = 0, start = 0;
    at::Tensor key_slots;
  };
  std::vector<Prefill> prefills;

  // Made on the host, then moved to `device` in one copy per index tensor.
  static PagedAttentionPlan make(const std::vector<PagedSlice>& slices, std::int64_t block_size,
                                 std::optional<std::int64_t> sliding_window,
                                 const c10::Device& device);
};

// Writes the step's keys and values [tokens, kv_heads, head_dim] into one layer's pool tensors
// at the plan's slots.
void write_kv(const at::Tensor& keys, const at::Tensor& values, at::Tensor& key_pool,
              at::Tensor& value_pool, const PagedAttentionPlan& plan);

// The attention of the step's `queries` [tokens, heads, head_dim] over one layer's keys and
// values (as write_kv left them, the step's own included), [tokens, heads, head_dim] in the
// queries' dtype. Query head h reads KV head h / (heads / kv_heads) (GQA). Scores and softmax in
// float32; the two matmuls in `compute`'s dtype.
at::Tensor paged_attention(const at::Tensor& queries, const at::Tensor& key_pool,
                           const at::Tensor& value_pool, const PagedAttentionPlan& plan,
                           std::int64_t block_size, double scaling,
                           std::optional<std::int64_t> sliding_window, c10::ScalarType compute);

}  // namespace hotswap::model_loader
