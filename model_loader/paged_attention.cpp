#include "model_loader/paged_attention.hpp"

#include <ATen/Parallel.h>
#include <ATen/TensorIndexing.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/full.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "model_loader/causal_attention.hpp"
#include "model_loader/cpu_dot.hpp"
#include "protocol/errors.hpp"

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

// The walk of rows [begin, end) of `walk` (each with one KV head's group of query heads, item =
// row * kv_heads + kv head): the scores of each position the row sees, their softmax, the values
// summed under it. q: the step's queries in float32 [tokens, heads, hd]; keys and values: a
// layer's pool [slots, kv_heads, hd].
template <class KV, class Out>
void walk_rows(const float* q, const KV* keys, const KV* values,
               const PagedAttentionPlan::Walk& walk, std::int64_t heads, std::int64_t kv_heads,
               std::int64_t hd, std::int64_t block_size, float scaling, Out* out,
               std::int64_t begin, std::int64_t end) {
  const std::int64_t group = heads / kv_heads, slot_stride = kv_heads * hd;
  std::vector<float> scores, acc(static_cast<std::size_t>(group * hd));
  for (std::int64_t item = begin; item < end; ++item) {
    const auto r = static_cast<std::size_t>(item / kv_heads);
    const std::int64_t kv = item % kv_heads, row = walk.row[r];
    const std::int64_t lowest = walk.lowest[r], last = walk.position[r];
    const std::int32_t* table = walk.tables.data() + walk.table[r];
    const std::int64_t n = last - lowest + 1;
    scores.resize(static_cast<std::size_t>(group * n));
    // The group's query heads are consecutive: rows of x for dot_rows.
    const float* qg = q + (row * heads + kv * group) * hd;
    // The positions lowest..last as runs within one block: fn(first position, its slot, count).
    auto for_each_run = [&](auto fn) {
      for (std::int64_t p = lowest; p <= last;) {
        const std::int64_t in_block = p % block_size;
        const std::int64_t count = std::min(block_size - in_block, last - p + 1);
        fn(p, std::int64_t{table[p / block_size]} * block_size + in_block, count);
        p += count;
      }
    };
    // scores[g * n + i]: query head g against the key at position lowest + i.
    for_each_run([&](std::int64_t p, std::int64_t slot, std::int64_t count) {
      dot_rows(DotKernel::kBest, qg, group, keys + slot * slot_stride + kv * hd, slot_stride, hd,
               scores.data() + (p - lowest), n, 0, count);
    });
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (std::int64_t g = 0; g < group; ++g) {
      float* s = scores.data() + g * n;
      float most = -std::numeric_limits<float>::infinity();
      for (std::int64_t i = 0; i < n; ++i) {
        s[i] *= scaling;
        most = std::max(most, s[i]);
      }
      float sum = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        s[i] = std::exp(s[i] - most);
        sum += s[i];
      }
      for (std::int64_t i = 0; i < n; ++i)
        s[i] /= sum;
    }
    // The values, weighted by the probabilities.
    for_each_run([&](std::int64_t p, std::int64_t slot, std::int64_t count) {
      for (std::int64_t g = 0; g < group; ++g)
        add_weighted_rows(DotKernel::kBest, acc.data() + g * hd,
                          scores.data() + g * n + (p - lowest), count,
                          values + slot * slot_stride + kv * hd, slot_stride, hd);
    });
    Out* o = out + (row * heads + kv * group) * hd;
    for (std::int64_t k = 0; k < group * hd; ++k)
      o[k] = static_cast<Out>(acc[static_cast<std::size_t>(k)]);
  }
}

// The walked rows of the plan, written into their rows of `out` (contiguous, the queries' dtype).
void attend_walked(const at::Tensor& queries, const at::Tensor& key_pool,
                   const at::Tensor& value_pool, const PagedAttentionPlan::Walk& walk,
                   std::int64_t block_size, double scaling, at::Tensor& out) {
  const std::int64_t heads = queries.size(1), hd = queries.size(2);
  const std::int64_t kv_heads = key_pool.size(1);
  const at::Tensor q = queries.to(at::kFloat).contiguous();
  const at::Tensor keys = key_pool.contiguous(), values = value_pool.contiguous();
  const auto items = static_cast<std::int64_t>(walk.row.size()) * kv_heads;
  // Each item is a row's keys times a head group; a few thousand multiply-adds are not worth
  // waking another thread for.
  std::int64_t work = 0;
  for (std::size_t r = 0; r < walk.row.size(); ++r)
    work += walk.position[r] - walk.lowest[r] + 1;
  const std::int64_t grain =
      work * heads * hd < (std::int64_t{1} << 16) ? std::max<std::int64_t>(items, 1) : 1;
  auto run = [&](auto* kv_type, auto* out_type) {
    using KV = std::remove_pointer_t<decltype(kv_type)>;
    using Out = std::remove_pointer_t<decltype(out_type)>;
    at::parallel_for(0, items, grain, [&](std::int64_t begin, std::int64_t end) {
      walk_rows(q.data_ptr<float>(), keys.data_ptr<KV>(), values.data_ptr<KV>(), walk, heads,
                kv_heads, hd, block_size, static_cast<float>(scaling), out.data_ptr<Out>(), begin,
                end);
    });
  };
  auto with_out = [&](auto* kv_type) {
    switch (out.scalar_type()) {
      case at::kFloat:
        return run(kv_type, static_cast<float*>(nullptr));
      case at::kBFloat16:
        return run(kv_type, static_cast<c10::BFloat16*>(nullptr));
      case at::kHalf:
        return run(kv_type, static_cast<c10::Half*>(nullptr));
      default:
        throw protocol::RuntimeError(std::string("paged attention on the CPU has no kernel for ") +
                                     c10::toString(out.scalar_type()) + " queries");
    }
  };
  switch (keys.scalar_type()) {
    case at::kFloat:
      return with_out(static_cast<float*>(nullptr));
    case at::kBFloat16:
      return with_out(static_cast<c10::BFloat16*>(nullptr));
    default:
      throw protocol::RuntimeError(std::string("paged attention on the CPU has no kernel for a ") +
                                   c10::toString(keys.scalar_type()) + " KV cache");
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
  const bool walk = device.is_cpu() && limits.walk_rows_on_cpu;
  std::int64_t row = 0;
  for (const auto& s : slices) {
    const auto& blocks = s.cache->blocks();
    for (std::int64_t p = s.start; p < s.start + s.num_tokens; ++p)
      slots.push_back(slot_of(blocks, p, block_size));
    const bool tiled = s.num_tokens == 1 || s.start + s.num_tokens <= limits.longest_tiled_prefill;
    if (tiled && walk) {
      const auto table = static_cast<std::int64_t>(plan.walk.tables.size());
      const std::int64_t used = (s.start + s.num_tokens + block_size - 1) / block_size;
      plan.walk.tables.insert(plan.walk.tables.end(), blocks.begin(), blocks.begin() + used);
      for (std::int64_t i = 0; i < s.num_tokens; ++i) {
        plan.walk.row.push_back(row + i);
        plan.walk.position.push_back(s.start + i);
        plan.walk.lowest.push_back(lowest_key(s.start + i, sliding_window));
        plan.walk.table.push_back(table);
      }
    } else if (s.num_tokens == 1) {
      decodes.add(blocks, row, s.start, 1);
    } else if (tiled) {
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
  at::Tensor out = at::empty(queries.sizes(), queries.options());
  if (!plan.walk.row.empty()) {
    attend_walked(queries, key_pool, value_pool, plan.walk, block_size, scaling, out);
  }
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
