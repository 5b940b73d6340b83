// Attention of one forward step over a paged KV cache (KvBlockPool): every sequence of the step
// in a few batched calls per layer, whatever the number of sequences, with no padding to the
// longest.
//
// The step's new tokens are cut into query tiles: a decode is a tile of one row, the prefill of
// a sequence of up to `longest_tiled_prefill` positions is tiles of block_size consecutive rows.
// Each (tile, block) pair, for the blocks a tile's rows can see, is one entry of a batched matmul
// over that block's keys, and a softmax segmented by tile joins a tile's pairs, so the work follows
// the positions each sequence holds (a tile skips the blocks past its last row). Decodes are one
// call and short prefills one more, each split only where its pairs would pass a memory budget. A
// longer prefill attends over its own keys, gathered from its blocks, in chunks of queries
// (causal_attention): there a few large matmuls dwarf the loop over such prefills, where tiles
// would copy each query tile and key block once per pair. The indices are made once per step
// (PagedAttentionPlan) and serve every layer. On the CPU, a kernel walks the decodes' and short
// prefills' rows over their blocks instead of tiling them (PagedAttentionPlan::Walk).
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

// What one batched call of a layer may gather, as the models set it: 256 MiB, about 1,440 pairs
// of decodes (23k cached positions) for Llama-3-8B's shapes in float32, 264 pairs of a
// prefill's 16-row tiles.
inline constexpr std::int64_t kPagedAttentionCallBudget = std::int64_t{256} << 20;

// Where the step's prefills split between tiles and calls of their own, and how large one
// batched call may grow.
struct PagedAttentionLimits {
  // The most positions (its cache's and the step's new ones) a sequence may have for its
  // prefill to be tiled. A 256-token prompt is 16 tiles and 136 pairs: tiles copy each query
  // tile once per block it sees, which grows with the product of the new tokens and the cache,
  // so a few new tokens after a long cache attend on their own too.
  std::int64_t longest_tiled_prefill = 256;
  // Bytes of one call's gathered queries, keys, values, scores and partial sums, for a layer of
  // these shapes; 0: no bound. A tile is never split between calls.
  std::int64_t bytes_per_call = 0;
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0, element_size = 4;
  // On the CPU, decodes and tiled prefills are not tiled: a kernel walks each row's blocks in
  // place (see PagedAttentionPlan::Walk). Off, the CPU runs the tiles as a GPU does (for tests).
  bool walk_rows_on_cpu = true;

  // What one (tile, block) pair of a tile of `rows_per_tile` rows gathers and makes.
  std::int64_t pair_bytes(std::int64_t rows_per_tile, std::int64_t block_size) const;
  // The most such pairs one call holds.
  std::int64_t pairs_per_call(std::int64_t rows_per_tile, std::int64_t block_size) const;
};

struct PagedAttentionPlan {
  // The pool slot each new token's key and value are written to, in row order [tokens].
  at::Tensor slots;

  // Query tiles attended in one batched call.
  struct Tiles {
    std::int64_t count = 0, rows_per_tile = 1;
    // [count * rows_per_tile]: the step row of each tile slot; a short tile repeats its last row.
    at::Tensor rows;
    // One entry per (tile, block) pair: which tile, which block [pairs]; which of the block's
    // slots each tile row may not see (past its position, or outside the sliding window)
    // [pairs, rows_per_tile, block_size]; which slots lie past the tile's last position, whose
    // values an earlier sequence may have left there (NaN at worst) [pairs, block_size].
    at::Tensor pair_tile, pair_block, pair_blocked, pair_unwritten;
    // Where some tile is short: the tile slots that hold a real row, and those rows.
    at::Tensor kept_slots, kept_rows;
  };
  // The calls: of decodes (rows_per_tile 1) and of tiled prefills (rows_per_tile block_size).
  std::vector<Tiles> tiles;

  // On the CPU, the rows of decodes and tiled prefills: a loop over the blocks each row sees
  // reads its keys and values where they lie in the pool, scores them, and sums the values
  // under one softmax per head, in float32. Nothing is gathered or masked: on a CPU, the tiles'
  // gathers, masks and many tiny matmuls cost more than the attention (6 of a 16 ms decode step
  // at 64 sequences of a small model, against well under 1 ms walked). Per row: its step row,
  // its position, the lowest position it sees (the sliding window), and where its sequence's
  // block table starts in `tables` (each sequence's table once, one after another).
  struct Walk {
    std::vector<std::int64_t> row, position, lowest, table;
    std::vector<std::int32_t> tables;
  };
  Walk walk;

  // Longer prefills: each one's first row, length and start, and the slots of its keys in
  // position order (everything up to its last new token).
  struct Prefill {
    std::int64_t first_row = 0, num_tokens = 0, start = 0;
    at::Tensor key_slots;
  };
  std::vector<Prefill> prefills;

  // Made on the host, then moved to `device` in one copy per index tensor.
  static PagedAttentionPlan make(const std::vector<PagedSlice>& slices, std::int64_t block_size,
                                 std::optional<std::int64_t> sliding_window,
                                 const c10::Device& device,
                                 const PagedAttentionLimits& limits = {});
};

// Writes the step's keys and values [tokens, kv_heads, head_dim] into one layer's pool tensors
// at the plan's slots.
void write_kv(const at::Tensor& keys, const at::Tensor& values, at::Tensor& key_pool,
              at::Tensor& value_pool, const PagedAttentionPlan& plan);

// The attention of the step's `queries` [tokens, heads, head_dim] over one layer's keys and
// values (as write_kv left them, the step's own included), [tokens, heads, head_dim] in the
// queries' dtype. Query head h reads KV head h / (heads / kv_heads) (GQA). Scores and softmax in
// float32; the two matmuls in `compute`'s dtype (the walked rows: everything in float32).
at::Tensor paged_attention(const at::Tensor& queries, const at::Tensor& key_pool,
                           const at::Tensor& value_pool, const PagedAttentionPlan& plan,
                           std::int64_t block_size, double scaling,
                           std::optional<std::int64_t> sliding_window, c10::ScalarType compute);

}  // namespace hotswap::model_loader
