#include "model_loader/paged_attention.hpp"

#include <ATen/TensorIndexing.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/full.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <limits>

#include "model_loader/causal_attention.hpp"

namespace hotswap::model_loader {
namespace {

at::Tensor longs_on(const std::vector<std::int64_t>& values, const c10::Device& device) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong)).to(device);
}

at::Tensor flags_on(const std::vector<std::uint8_t>& values, std::int64_t row,
                    const c10::Device& device) {
  return at::tensor(values, at::TensorOptions().dtype(at::kByte))
      .to(at::kBool)
      .reshape({-1, row})
      .to(device);
}

// The slot of position `p` of a sequence holding `blocks`.
std::int64_t slot_of(const std::vector<std::int32_t>& blocks, std::int64_t p,
                     std::int64_t block_size) {
  return std::int64_t{blocks[static_cast<std::size_t>(p / block_size)]} * block_size +
         p % block_size;
}

// The lowest position the query at `position` sees.
std::int64_t lowest_key(std::int64_t position, std::optional<std::int64_t> sliding_window) {
  return sliding_window ? std::max<std::int64_t>(0, position - *sliding_window + 1) : 0;
}

// Tiles and their pairs, collected on the host into calls of at most `pairs_per_call` pairs;
// each full call goes to `calls`, on the device.
class TileBuilder {
 public:
  TileBuilder(std::int64_t rows_per_tile, std::int64_t block_size,
              std::optional<std::int64_t> sliding_window, std::int64_t pairs_per_call,
              const c10::Device& device, std::vector<PagedAttentionPlan::Tiles>& calls)
      : rows_per_tile_(rows_per_tile),
        block_size_(block_size),
        window_(sliding_window),
        pairs_per_call_(pairs_per_call),
        device_(device),
        calls_(calls) {}

  // Adds the tile of `n` rows from step row `first_row`, at positions `position` onwards, of
  // the sequence holding `blocks`; first ends the call so far if the tile's pairs would take it
  // past its budget.
  void add(const std::vector<std::int32_t>& blocks, std::int64_t first_row, std::int64_t position,
           std::int64_t n) {
    const std::int64_t last = position + n - 1;
    const std::int64_t first_block = lowest_key(position, window_) / block_size_;
    const std::int64_t pairs = last / block_size_ - first_block + 1;
    if (count_ > 0 && static_cast<std::int64_t>(pair_tile_.size()) + pairs > pairs_per_call_) {
      flush();
    }
    for (std::int64_t r = 0; r < rows_per_tile_; ++r) {
      rows_.push_back(first_row + std::min(r, n - 1));
      if (r < n) {
        kept_slots_.push_back(count_ * rows_per_tile_ + r);
        kept_rows_.push_back(first_row + r);
      } else {
        short_ = true;
      }
    }
    for (std::int64_t b = first_block; b <= last / block_size_; ++b) {
      pair_tile_.push_back(count_);
      pair_block_.push_back(blocks[static_cast<std::size_t>(b)]);
      for (std::int64_t r = 0; r < rows_per_tile_; ++r) {
        const std::int64_t query = position + std::min(r, n - 1);
        const std::int64_t lowest = lowest_key(query, window_);
        for (std::int64_t i = 0; i < block_size_; ++i) {
          const std::int64_t key = b * block_size_ + i;
          blocked_.push_back(key > query || key < lowest ? 1 : 0);
        }
      }
      for (std::int64_t i = 0; i < block_size_; ++i)
        unwritten_.push_back(b * block_size_ + i > last ? 1 : 0);
    }
    ++count_;
  }

  // Ends the call so far, if it holds a tile.
  void flush() {
    if (count_ == 0) return;
    PagedAttentionPlan::Tiles t;
    t.count = count_;
    t.rows_per_tile = rows_per_tile_;
    t.rows = longs_on(rows_, device_);
    t.pair_tile = longs_on(pair_tile_, device_);
    t.pair_block = longs_on(pair_block_, device_);
    t.pair_blocked = flags_on(blocked_, rows_per_tile_ * block_size_, device_)
                         .view({-1, rows_per_tile_, block_size_});
    t.pair_unwritten = flags_on(unwritten_, block_size_, device_);
    if (short_) {
      t.kept_slots = longs_on(kept_slots_, device_);
      t.kept_rows = longs_on(kept_rows_, device_);
    }
    calls_.push_back(std::move(t));
    count_ = 0;
    short_ = false;
    for (auto* v : {&rows_, &pair_tile_, &pair_block_, &kept_slots_, &kept_rows_})
      v->clear();
    blocked_.clear();
    unwritten_.clear();
  }

 private:
  std::int64_t rows_per_tile_, block_size_;
  std::optional<std::int64_t> window_;
  std::int64_t pairs_per_call_;
  c10::Device device_;
  std::vector<PagedAttentionPlan::Tiles>& calls_;
  std::int64_t count_ = 0;
  bool short_ = false;
  std::vector<std::int64_t> rows_, pair_tile_, pair_block_, kept_slots_, kept_rows_;
  std::vector<std::uint8_t> blocked_, unwritten_;
};

// The attention of one call's tiles, written into their rows of `out`.
void attend_tiles(const at::Tensor& queries, const at::Tensor& key_pool,
                  const at::Tensor& value_pool, const PagedAttentionPlan::Tiles& t,
                  std::int64_t block_size, double scaling, c10::ScalarType compute,
                  at::Tensor& out) {
  const std::int64_t heads = queries.size(1), hd = queries.size(2);
  const std::int64_t kv_heads = key_pool.size(1), group = heads / kv_heads;
  const std::int64_t blocks = key_pool.size(0) / block_size;
  const std::int64_t n = t.count, rows = t.rows_per_tile, pairs = t.pair_tile.size(0);
  const auto floats = queries.options().dtype(at::kFloat);
  // [pairs, kv_heads, group * rows, hd]: each pair's tile of query heads, grouped by the KV
  // head they read.
  at::Tensor q = queries.index({t.rows})
                     .to(compute)
                     .reshape({n, rows, kv_heads, group, hd})
                     .permute({0, 2, 3, 1, 4})
                     .reshape({n, kv_heads, group * rows, hd})
                     .index({t.pair_tile});
  // [pairs, kv_heads, hd, block_size] and [pairs, kv_heads, block_size, hd]: each pair's block.
  at::Tensor k = key_pool.view({blocks, block_size, kv_heads, hd})
                     .index({t.pair_block})
                     .to(compute)
                     .permute({0, 2, 3, 1});
  // A masked slot's weight is 0, but 0 times a NaN left in a reused block by an earlier
  // sequence is NaN: its value is zeroed in the gathered copy.
  at::Tensor v = value_pool.view({blocks, block_size, kv_heads, hd})
                     .index({t.pair_block})
                     .masked_fill_(t.pair_unwritten.view({pairs, block_size, 1, 1}), 0)
                     .to(compute)
                     .permute({0, 2, 1, 3});
  // [pairs, kv, group, rows, block_size]
  at::Tensor scores = (at::matmul(q, k).to(at::kFloat) * scaling)
                          .view({pairs, kv_heads, group, rows, block_size})
                          .masked_fill_(t.pair_blocked.view({pairs, 1, 1, rows, block_size}),
                                        -std::numeric_limits<float>::infinity());
  // A softmax over each tile's pairs together: each row's largest score, the exponentials under
  // it, their sum; each pair's weighted values, summed per tile and divided once.
  at::Tensor most =
      at::full({n, kv_heads, group, rows}, -std::numeric_limits<float>::infinity(), floats)
          .index_reduce_(0, t.pair_tile, scores.amax(-1), "amax");
  at::Tensor weights = at::exp(scores - most.index({t.pair_tile}).unsqueeze(-1));
  at::Tensor sums =
      at::zeros({n, kv_heads, group, rows}, floats).index_add_(0, t.pair_tile, weights.sum(-1));
  at::Tensor partial =
      at::matmul(weights.view({pairs, kv_heads, group * rows, block_size}).to(compute), v)
          .to(at::kFloat);  // [pairs, kv, group * rows, hd]
  at::Tensor attended = at::zeros({n, kv_heads, group * rows, hd}, floats)
                            .index_add_(0, t.pair_tile, partial)
                            .view({n, kv_heads, group, rows, hd})
                            .div_(sums.unsqueeze(-1))
                            .permute({0, 3, 1, 2, 4})  // [tiles, rows, kv, group, hd]
                            .reshape({n * rows, heads, hd})
                            .to(queries.scalar_type());
  if (t.kept_slots.defined()) {
    out.index_copy_(0, t.kept_rows, attended.index({t.kept_slots}));
  } else {
    out.index_copy_(0, t.rows, attended);
  }
}

}  // namespace

std::int64_t PagedAttentionLimits::pair_bytes(std::int64_t rows_per_tile,
                                              std::int64_t block_size) const {
  // Its keys and values, its copy of the tile's queries and its partial sums in the compute
  // dtype; its scores, exponentials and partial sums in float32; its masks.
  return element_size *
             (2 * kv_heads * block_size * head_dim + 2 * heads * rows_per_tile * head_dim) +
         4 * (3 * heads * rows_per_tile * block_size + heads * rows_per_tile * head_dim) +
         (rows_per_tile + 1) * block_size;
}

std::int64_t PagedAttentionLimits::pairs_per_call(std::int64_t rows_per_tile,
                                                  std::int64_t block_size) const {
  if (bytes_per_call <= 0) return std::numeric_limits<std::int64_t>::max();
  return std::max<std::int64_t>(
      1, bytes_per_call / std::max<std::int64_t>(1, pair_bytes(rows_per_tile, block_size)));
}

PagedAttentionPlan PagedAttentionPlan::make(const std::vector<PagedSlice>& slices,
                                            std::int64_t block_size,
                                            std::optional<std::int64_t> sliding_window,
                                            const c10::Device& device,
                                            const PagedAttentionLimits& limits) {
  PagedAttentionPlan plan;
  std::vector<std::int64_t> slots;
  TileBuilder decodes(1, block_size, sliding_window, limits.pairs_per_call(1, block_size), device,
                      plan.tiles);
  TileBuilder prefill_tiles(block_size, block_size, sliding_window,
                            limits.pairs_per_call(block_size, block_size), device, plan.tiles);
  std::int64_t row = 0;
  for (const auto& s : slices) {
    const auto& blocks = s.cache->blocks();
    for (std::int64_t p = s.start; p < s.start + s.num_tokens; ++p)
      slots.push_back(slot_of(blocks, p, block_size));
    if (s.num_tokens == 1) {
      decodes.add(blocks, row, s.start, 1);
    } else if (s.start + s.num_tokens <= limits.longest_tiled_prefill) {
      for (std::int64_t first = 0; first < s.num_tokens; first += block_size) {
        prefill_tiles.add(blocks, row + first, s.start + first,
                          std::min(block_size, s.num_tokens - first));
      }
    } else {
      std::vector<std::int64_t> key_slots;
      key_slots.reserve(static_cast<std::size_t>(s.start + s.num_tokens));
      for (std::int64_t p = 0; p < s.start + s.num_tokens; ++p)
        key_slots.push_back(slot_of(blocks, p, block_size));
      plan.prefills.push_back({row, s.num_tokens, s.start, longs_on(key_slots, device)});
    }
    row += s.num_tokens;
  }
  decodes.flush();
  prefill_tiles.flush();
  plan.slots = longs_on(slots, device);
  return plan;
}

void write_kv(const at::Tensor& keys, const at::Tensor& values, at::Tensor& key_pool,
              at::Tensor& value_pool, const PagedAttentionPlan& plan) {
  key_pool.index_copy_(0, plan.slots, keys.to(key_pool.scalar_type()));
  value_pool.index_copy_(0, plan.slots, values.to(value_pool.scalar_type()));
}

at::Tensor paged_attention(const at::Tensor& queries, const at::Tensor& key_pool,
                           const at::Tensor& value_pool, const PagedAttentionPlan& plan,
                           std::int64_t block_size, double scaling,
                           std::optional<std::int64_t> sliding_window, c10::ScalarType compute) {
  const std::int64_t heads = queries.size(1), hd = queries.size(2);
  const std::int64_t kv_heads = key_pool.size(1), group = heads / kv_heads;
  at::Tensor out = at::empty_like(queries);
  for (const auto& t : plan.tiles)
    attend_tiles(queries, key_pool, value_pool, t, block_size, scaling, compute, out);

  for (const auto& p : plan.prefills) {
    const std::int64_t keys = p.start + p.num_tokens;
    at::Tensor k = key_pool.index({p.key_slots}).to(compute).permute({1, 0, 2});  // [kv, keys, hd]
    at::Tensor v = value_pool.index({p.key_slots}).to(compute).permute({1, 0, 2});
    if (group > 1) {  // GQA: query head i reads kv head i / group
      k = k.unsqueeze(1).expand({kv_heads, group, keys, hd}).reshape({heads, keys, hd});
      v = v.unsqueeze(1).expand({kv_heads, group, keys, hd}).reshape({heads, keys, hd});
    }
    at::Tensor q = queries.narrow(0, p.first_row, p.num_tokens).transpose(0, 1).to(compute);
    out.narrow(0, p.first_row, p.num_tokens)
        .copy_(causal_attention(q, k, v, p.start, scaling, sliding_window).transpose(0, 1));
  }
  return out;
}

}  // namespace hotswap::model_loader
