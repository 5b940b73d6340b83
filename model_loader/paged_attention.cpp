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

// The slot of position `p` of a sequence holding `blocks`.
std::int64_t slot_of(const std::vector<std::int32_t>& blocks, std::int64_t p,
                     std::int64_t block_size) {
  return std::int64_t{blocks[static_cast<std::size_t>(p / block_size)]} * block_size +
         p % block_size;
}

}  // namespace

PagedAttentionPlan PagedAttentionPlan::make(const std::vector<PagedSlice>& slices,
                                            std::int64_t block_size,
                                            std::optional<std::int64_t> sliding_window,
                                            const c10::Device& device) {
  PagedAttentionPlan plan;
  std::vector<std::int64_t> slots, decode_rows, pair_decode, pair_block;
  std::vector<std::uint8_t> blocked;
  std::int64_t row = 0;
  for (const auto& s : slices) {
    const auto& blocks = s.cache->blocks();
    for (std::int64_t p = s.start; p < s.start + s.num_tokens; ++p)
      slots.push_back(slot_of(blocks, p, block_size));
    if (s.num_tokens == 1) {
      const std::int64_t query = s.start;  // its position; it sees keys 0 .. query
      const std::int64_t lowest =
          sliding_window ? std::max<std::int64_t>(0, query - *sliding_window + 1) : 0;
      decode_rows.push_back(row);
      // Only the blocks holding a key it sees: every pair has one unmasked key at least.
      for (std::int64_t b = lowest / block_size; b <= query / block_size; ++b) {
        pair_decode.push_back(plan.decodes);
        pair_block.push_back(blocks[static_cast<std::size_t>(b)]);
        for (std::int64_t i = 0; i < block_size; ++i) {
          const std::int64_t key = b * block_size + i;
          blocked.push_back(key > query || key < lowest ? 1 : 0);
        }
      }
      ++plan.decodes;
    } else {
      std::vector<std::int64_t> key_slots;
      key_slots.reserve(static_cast<std::size_t>(s.start + s.num_tokens));
      for (std::int64_t p = 0; p < s.start + s.num_tokens; ++p)
        key_slots.push_back(slot_of(blocks, p, block_size));
      plan.prefills.push_back({row, s.num_tokens, s.start, longs_on(key_slots, device)});
    }
    row += s.num_tokens;
  }
  plan.slots = longs_on(slots, device);
  if (plan.decodes > 0) {
    plan.decode_rows = longs_on(decode_rows, device);
    plan.pair_decode = longs_on(pair_decode, device);
    plan.pair_block = longs_on(pair_block, device);
    plan.pair_blocked = at::tensor(blocked, at::TensorOptions().dtype(at::kByte))
                            .to(at::kBool)
                            .reshape({-1, block_size})
                            .to(device);
  }
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
  using at::indexing::TensorIndex;
  const std::int64_t heads = queries.size(1), hd = queries.size(2);
  const std::int64_t kv_heads = key_pool.size(1), group = heads / kv_heads;
  const std::int64_t blocks = key_pool.size(0) / block_size;
  at::Tensor out = at::empty_like(queries);

  if (plan.decodes > 0) {
    const std::int64_t d = plan.decodes, pairs = plan.pair_block.size(0);
    const auto floats = queries.options().dtype(at::kFloat);
    // [pairs, kv_heads, group, hd]: each pair's query heads, grouped by the KV head they read.
    at::Tensor q = queries.index({plan.decode_rows})
                       .to(compute)
                       .reshape({d, kv_heads, group, hd})
                       .index({plan.pair_decode});
    // [pairs, kv_heads, hd, block_size] and [pairs, kv_heads, block_size, hd]: each pair's block.
    at::Tensor k = key_pool.view({blocks, block_size, kv_heads, hd})
                       .index({plan.pair_block})
                       .to(compute)
                       .permute({0, 2, 3, 1});
    // A masked slot's weight is 0, but 0 times a NaN left in a reused block by an earlier
    // sequence is NaN: its value is zeroed in the gathered copy.
    at::Tensor v = value_pool.view({blocks, block_size, kv_heads, hd})
                       .index({plan.pair_block})
                       .masked_fill_(plan.pair_blocked.view({pairs, block_size, 1, 1}), 0)
                       .to(compute)
                       .permute({0, 2, 1, 3});
    at::Tensor scores = at::matmul(q, k).to(at::kFloat) * scaling;  // [pairs, kv, group, bs]
    scores.masked_fill_(plan.pair_blocked.view({pairs, 1, 1, block_size}),
                        -std::numeric_limits<float>::infinity());
    // A softmax over each decode's pairs together: its largest score, the exponentials under
    // it, their sum; each pair's weighted values, summed per decode and divided once.
    at::Tensor most =
        at::full({d, kv_heads, group}, -std::numeric_limits<float>::infinity(), floats)
            .index_reduce_(0, plan.pair_decode, scores.amax(-1), "amax");
    at::Tensor weights = at::exp(scores - most.index({plan.pair_decode}).unsqueeze(-1));
    at::Tensor sums =
        at::zeros({d, kv_heads, group}, floats).index_add_(0, plan.pair_decode, weights.sum(-1));
    at::Tensor partial = at::matmul(weights.to(compute), v).to(at::kFloat);  // [pairs, kv, g, hd]
    at::Tensor attended = at::zeros({d, kv_heads, group, hd}, floats)
                              .index_add_(0, plan.pair_decode, partial)
                              .div_(sums.unsqueeze(-1));
    out.index_copy_(0, plan.decode_rows,
                    attended.reshape({d, heads, hd}).to(queries.scalar_type()));
  }

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
