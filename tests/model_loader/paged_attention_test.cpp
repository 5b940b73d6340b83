#include "model_loader/paged_attention.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/randn.h>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "model_loader/causal_attention.hpp"
#include "model_loader/kv_block_pool.hpp"

using namespace hotswap::model_loader;

namespace {

constexpr std::int64_t kHeads = 4, kKvHeads = 2, kHeadDim = 8, kBlock = 4;

struct Sequence {
  std::int64_t start, num_tokens;  // the step's share
  at::Tensor keys, values;         // every position's [start + num_tokens, kv_heads, hd]
  KvCache cache;
};

// How the step's tokens went to calls.
struct Calls {
  std::size_t decode_calls = 0, tiled_calls = 0, own_prefills = 0;
  std::int64_t decodes = 0, prefill_tiles = 0, walked_rows = 0;
};

Calls calls_of(const PagedAttentionPlan& plan) {
  Calls c;
  for (const auto& t : plan.tiles) {
    if (t.rows_per_tile == 1) {
      ++c.decode_calls;
      c.decodes += t.count;
    } else {
      ++c.tiled_calls;
      c.prefill_tiles += t.count;
    }
  }
  c.own_prefills = plan.prefills.size();
  c.walked_rows = static_cast<std::int64_t>(plan.walk.row.size());
  return c;
}

// The tiles, as a GPU runs them, on the CPU.
PagedAttentionLimits tiled(PagedAttentionLimits limits = {}) {
  limits.walk_rows_on_cpu = false;
  return limits;
}

// paged_attention over a mix of prefills and decodes, against causal_attention of each
// sequence over its keys laid out whole (in float32, of the values as `dtype` holds them); how
// the plan split them.
Calls check_against_contiguous_attention(std::optional<std::int64_t> window,
                                         const PagedAttentionLimits& limits = {},
                                         at::ScalarType dtype = at::kFloat) {
  at::manual_seed(7);
  const auto floats = at::TensorOptions().dtype(at::kFloat);
  auto rounded = [&](const at::Tensor& t) { return t.to(dtype).to(at::kFloat); };
  auto pool = std::make_shared<KvBlockPool>(
      KvBlockShape{1, kKvHeads, kHeadDim, kBlock, floats.dtype(dtype)}, 64);
  std::vector<Sequence> seqs;
  // A first prefill, decodes at a block's first and middle slots and past several blocks, a
  // one-token prompt, a prefill that continues a cache, one longer than a block from the middle
  // of one, one whole block.
  for (auto [start, n] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {0, 6}, {9, 1}, {4, 1}, {14, 1}, {0, 1}, {5, 3}, {2, 11}, {4, 4}}) {
    seqs.push_back({start, n, rounded(at::randn({start + n, kKvHeads, kHeadDim}, floats)),
                    rounded(at::randn({start + n, kKvHeads, kHeadDim}, floats)), KvCache{}});
  }
  // Blocks taken one position at a time, in turn, so that each sequence's are scattered.
  for (std::int64_t p = 0; p < 20; ++p) {
    for (auto& s : seqs) {
      if (p >= s.start + s.num_tokens) continue;
      s.cache.length = p;
      pool->reserve(s.cache, 1);
    }
  }
  // Every earlier position written as a history step would have, then the step's own.
  std::vector<PagedSlice> history, step;
  std::vector<at::Tensor> history_k, history_v, step_k, step_v, queries;
  for (auto& s : seqs) {
    if (s.start > 0) {
      history.push_back({&s.cache, 0, s.start});
      history_k.push_back(s.keys.narrow(0, 0, s.start));
      history_v.push_back(s.values.narrow(0, 0, s.start));
    }
    step.push_back({&s.cache, s.start, s.num_tokens});
    step_k.push_back(s.keys.narrow(0, s.start, s.num_tokens));
    step_v.push_back(s.values.narrow(0, s.start, s.num_tokens));
    queries.push_back(rounded(at::randn({s.num_tokens, kHeads, kHeadDim}, floats)));
  }
  at::Tensor key_pool = pool->keys(0), value_pool = pool->values(0);
  // What earlier sequences may have left in reused blocks, NaN at worst, must not leak in.
  key_pool.fill_(std::numeric_limits<float>::quiet_NaN());
  value_pool.fill_(std::numeric_limits<float>::quiet_NaN());
  const c10::Device cpu(c10::kCPU);
  write_kv(at::cat(history_k), at::cat(history_v), key_pool, value_pool,
           PagedAttentionPlan::make(history, kBlock, window, cpu));
  const auto plan = PagedAttentionPlan::make(step, kBlock, window, cpu, limits);
  write_kv(at::cat(step_k), at::cat(step_v), key_pool, value_pool, plan);

  at::Tensor out = paged_attention(at::cat(queries).to(dtype), key_pool, value_pool, plan, kBlock,
                                   0.3, window, at::kFloat)
                       .to(at::kFloat);
  // bfloat16 out: one rounding of each result (8 bits of mantissa).
  const double rtol = dtype == at::kFloat ? 1e-5 : 1e-2, atol = dtype == at::kFloat ? 1e-6 : 1e-2;
  std::int64_t row = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const auto& s = seqs[i];
    const std::int64_t keys = s.start + s.num_tokens, group = kHeads / kKvHeads;
    auto spread = [&](const at::Tensor& t) {  // [keys, kv, hd] -> [heads, keys, hd]
      return t.permute({1, 0, 2})
          .unsqueeze(1)
          .expand({kKvHeads, group, keys, kHeadDim})
          .reshape({kHeads, keys, kHeadDim});
    };
    at::Tensor expected = causal_attention(queries[i].transpose(0, 1), spread(s.keys),
                                           spread(s.values), s.start, 0.3, window)
                              .transpose(0, 1);
    BOOST_TEST(at::allclose(out.narrow(0, row, s.num_tokens), expected, rtol, atol),
               "sequence " << i << " (start " << s.start << ", " << s.num_tokens << " tokens)");
    row += s.num_tokens;
  }
  return calls_of(plan);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(paged_attention)

BOOST_AUTO_TEST_CASE(prefills_and_decodes_over_scattered_blocks_equal_attention_over_whole_keys) {
  const Calls calls = check_against_contiguous_attention(std::nullopt, tiled());
  // Every sequence in two calls: the one-token prompt is a decode too; the prefills of 6, 3, 11
  // and 4 tokens are 2 + 1 + 3 + 1 tiles of a block's rows.
  BOOST_TEST(calls.decode_calls == 1u);
  BOOST_TEST(calls.decodes == 4);
  BOOST_TEST(calls.tiled_calls == 1u);
  BOOST_TEST(calls.prefill_tiles == 7);
  BOOST_TEST(calls.own_prefills == 0u);
  BOOST_TEST(calls.walked_rows == 0);
}

// On the CPU the same rows are walked over their blocks in place: no tiles, nothing gathered;
// in float32, and with a bfloat16 cache and queries (the result rounded once).
BOOST_AUTO_TEST_CASE(the_cpu_walks_each_row_over_its_blocks_in_place) {
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    const Calls calls = check_against_contiguous_attention(std::nullopt, {}, dtype);
    BOOST_TEST(calls.walked_rows == 4 + 6 + 3 + 11 + 4);
    BOOST_TEST(calls.decode_calls + calls.tiled_calls == 0u);
    BOOST_TEST(calls.own_prefills == 0u);
  }
}

// A window hides the oldest keys: whole blocks outside it are left out of a tile's pairs, and
// a walked row starts at the window's first position.
BOOST_AUTO_TEST_CASE(a_sliding_window_hides_the_same_keys_as_without_blocks) {
  for (auto window : {3, 5}) {
    check_against_contiguous_attention(window, tiled());
    check_against_contiguous_attention(window);
    check_against_contiguous_attention(window, {}, at::kBFloat16);
  }
}

// A step of 64 sequences (enough work for the walk to run on every intra-op thread), walked and
// tiled, gives the same attention.
BOOST_AUTO_TEST_CASE(a_large_step_walked_across_threads_equals_its_tiles) {
  at::manual_seed(11);
  const auto floats = at::TensorOptions().dtype(at::kFloat);
  auto pool =
      std::make_shared<KvBlockPool>(KvBlockShape{1, kKvHeads, kHeadDim, kBlock, floats}, 2048);
  std::vector<KvCache> caches(64);
  std::vector<PagedSlice> step;
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < caches.size(); ++i) {
    // Mostly decodes after 20-83 positions, every fourth a prefill of 1-16 tokens after 0-7.
    const auto start = static_cast<std::int64_t>(i % 4 == 0 ? i % 8 : 20 + i);
    const auto n = static_cast<std::int64_t>(i % 4 == 0 ? 1 + i % 16 : 1);
    pool->reserve(caches[i], start + n);
    caches[i].length = start;
    step.push_back({&caches[i], start, n});
    tokens += n;
  }
  // copy_ of a fresh randn rather than normal_(): GCC 12 at -O1 (the sanitizer build) warns that
  // normal_'s defaulted std::optional<Generator> may be read uninitialized.
  pool->keys(0).copy_(at::randn(pool->keys(0).sizes(), floats));
  pool->values(0).copy_(at::randn(pool->values(0).sizes(), floats));
  const at::Tensor queries = at::randn({tokens, kHeads, kHeadDim}, floats);
  const c10::Device cpu(c10::kCPU);
  const auto walked_plan = PagedAttentionPlan::make(step, kBlock, 5, cpu);
  BOOST_TEST(static_cast<std::int64_t>(walked_plan.walk.row.size()) == tokens);
  BOOST_TEST(walked_plan.tiles.empty());
  for (auto window : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{5}}) {
    const auto walked = PagedAttentionPlan::make(step, kBlock, window, cpu);
    const auto tiles = PagedAttentionPlan::make(step, kBlock, window, cpu, tiled());
    at::Tensor a = hotswap::model_loader::paged_attention(
        queries, pool->keys(0), pool->values(0), walked, kBlock, 0.125, window, at::kFloat);
    at::Tensor b = hotswap::model_loader::paged_attention(queries, pool->keys(0), pool->values(0),
                                                          tiles, kBlock, 0.125, window, at::kFloat);
    BOOST_TEST(at::allclose(a, b, 1e-5, 1e-6));
  }
}

// Prefills of sequences longer than the limit attend on their own; the tiles of the others, and
// the decodes, are split between calls where their pairs would pass the budget, never inside a
// tile.
BOOST_AUTO_TEST_CASE(long_prefills_attend_alone_and_a_budget_splits_calls_between_tiles) {
  PagedAttentionLimits limits = tiled();
  // Sequences of 6, 8 and 8 positions are tiled (2 + 1 + 1 tiles); the 11 new tokens after 2
  // cached ones, 13 positions, attend on their own.
  limits.longest_tiled_prefill = 8;
  limits.heads = kHeads;
  limits.kv_heads = kKvHeads;
  limits.head_dim = kHeadDim;
  limits.bytes_per_call = 1;  // less than a pair: one tile a call, whatever its pairs
  for (auto window : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{3}}) {
    const Calls calls = check_against_contiguous_attention(window, limits);
    BOOST_TEST(calls.own_prefills == 1u);
    BOOST_TEST(calls.decodes == 4);
    BOOST_TEST(calls.decode_calls == 4u);
    BOOST_TEST(calls.prefill_tiles == 4);
    BOOST_TEST(calls.tiled_calls == 4u);
  }
  // Six decode pairs a call: the decodes at positions 9, 4, 14 and 0 hold 3, 2, 4 and 1 pairs
  // (blocks 0-2, 0-1, 0-3, 0), so {9, 4} and {14, 0}.
  limits.bytes_per_call = 6 * limits.pair_bytes(1, kBlock);
  const Calls calls = check_against_contiguous_attention(std::nullopt, limits);
  BOOST_TEST(calls.decode_calls == 2u);
  BOOST_TEST(calls.decodes == 4);
}

BOOST_AUTO_TEST_SUITE_END()
