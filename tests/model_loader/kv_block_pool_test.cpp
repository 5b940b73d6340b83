#include "model_loader/kv_block_pool.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <boost/test/unit_test.hpp>

#include <memory>
#include <string>

#include "protocol/errors.hpp"

using hotswap::model_loader::KvBlockPool;
using hotswap::model_loader::KvBlockShape;
using hotswap::model_loader::KvCache;

namespace {

KvBlockShape tiny_shape() {
  return KvBlockShape{/*layers=*/2, /*kv_heads=*/2, /*head_dim=*/4, /*block_size=*/4,
                      at::TensorOptions().dtype(at::kFloat)};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kv_block_pool)

// A block holds keys and values of every layer: 2 layers x 2 (keys, values) x 4 positions x 2
// heads x 4 dims x 4 bytes.
BOOST_AUTO_TEST_CASE(a_block_counts_keys_and_values_of_every_layer) {
  BOOST_TEST(tiny_shape().block_bytes() == 2u * 2 * 4 * 2 * 4 * 4);
}

// A cache takes the blocks its positions need, no more, and gives them back when it goes: the
// next cache gets the same blocks, so memory follows the positions in use.
BOOST_AUTO_TEST_CASE(blocks_follow_the_positions_in_use_and_come_back_when_a_cache_goes) {
  auto pool = std::make_shared<KvBlockPool>(tiny_shape(), 10);
  BOOST_TEST(pool->free_blocks() == 10);
  std::vector<std::int32_t> first_blocks;
  {
    KvCache cache;
    pool->reserve(cache, 5);  // 5 positions: 2 blocks of 4
    BOOST_TEST(cache.blocks().size() == 2u);
    BOOST_TEST(cache.capacity() == 8);
    cache.length = 5;
    pool->reserve(cache, 3);  // 8: room already
    BOOST_TEST(cache.blocks().size() == 2u);
    pool->reserve(cache, 4);  // 9: one more
    BOOST_TEST(cache.blocks().size() == 3u);
    BOOST_TEST(pool->free_blocks() == 7);
    first_blocks = cache.blocks();
  }
  BOOST_TEST(pool->free_blocks() == 10);
  KvCache next;
  pool->reserve(next, 12);
  BOOST_TEST(next.blocks() == first_blocks);
  next.peer_tag = std::make_shared<int>(1);
  next.clear();
  BOOST_TEST(next.blocks().empty());
  BOOST_TEST(next.length == 0);
  BOOST_TEST(!next.peer_tag);  // a cleared cache starts over under a new name
  BOOST_TEST(pool->free_blocks() == 10);
}

// Past the budget a reserve takes nothing, keeps what the cache held, and says what it needed.
BOOST_AUTO_TEST_CASE(a_reserve_past_the_budget_names_the_need_and_takes_nothing) {
  auto pool = std::make_shared<KvBlockPool>(tiny_shape(), 3);
  KvCache a, b;
  pool->reserve(a, 8);
  a.length = 8;
  try {
    pool->reserve(b, 5);
    BOOST_FAIL("a reserve past the budget succeeded");
  } catch (const hotswap::protocol::RuntimeError& e) {
    const std::string message = e.what();
    BOOST_TEST(message.find("needs 2 more blocks of 4 positions, 1 of the 3") != std::string::npos,
               message);
    BOOST_TEST(message.find("--kv-cache-memory-bytes") != std::string::npos, message);
  }
  BOOST_TEST(b.blocks().empty());
  BOOST_TEST(a.blocks().size() == 2u);
  BOOST_TEST(pool->free_blocks() == 1);
}

// The tensors grow as blocks are taken (doubling, at least 16 blocks, never past the budget),
// and what was written stays where it was.
BOOST_AUTO_TEST_CASE(the_tensors_grow_on_demand_and_keep_their_contents) {
  auto pool = std::make_shared<KvBlockPool>(tiny_shape(), 40);
  KvCache a;
  pool->reserve(a, 4);
  BOOST_TEST(pool->keys(1).size(0) == 16 * 4);
  const std::int64_t slot = std::int64_t{a.blocks()[0]} * 4;
  at::Tensor written = at::arange(2 * 4, at::TensorOptions().dtype(at::kFloat)).reshape({2, 4});
  pool->keys(1)[slot].copy_(written);
  a.length = 4;
  KvCache b;
  pool->reserve(b, 4 * 20);  // 21 blocks in all: 32
  BOOST_TEST(pool->keys(1).size(0) == 32 * 4);
  BOOST_TEST(at::equal(pool->keys(1)[slot], written));
  KvCache c;
  pool->reserve(c, 4 * 19);  // 40 in all: capped at the budget, not 64
  BOOST_TEST(pool->values(0).size(0) == 40 * 4);
  BOOST_TEST(pool->free_blocks() == 0);
}

// A GPU's pool is allocated whole at start: the tensors never move after (a CUDA graph reads
// them where it was captured), and every block is free.
BOOST_AUTO_TEST_CASE(allocate_all_takes_the_whole_budget_once) {
  auto pool = std::make_shared<KvBlockPool>(tiny_shape(), 40, "KV cache 1.0 GiB (a test)");
  pool->allocate_all();
  BOOST_TEST(pool->keys(0).size(0) == 40 * 4);
  const void* keys = pool->keys(0).data_ptr();
  BOOST_TEST(pool->free_blocks() == 40);
  KvCache a;
  pool->reserve(a, 4 * 40);
  BOOST_TEST(pool->keys(0).data_ptr() == keys, "no growth after");
  BOOST_TEST(a.blocks().front() == 0, "the lowest block first");
  pool->allocate_all();  // nothing more to allocate
  BOOST_TEST(pool->keys(0).data_ptr() == keys);
  BOOST_TEST(pool->budget() == "KV cache 1.0 GiB (a test)");
}

// A cache is one pool's: another model's pool refuses it, and a cache that outlives its pool
// (a model replaced) goes quietly.
BOOST_AUTO_TEST_CASE(a_cache_belongs_to_one_pool) {
  auto one = std::make_shared<KvBlockPool>(tiny_shape(), 4);
  auto other = std::make_shared<KvBlockPool>(tiny_shape(), 4);
  KvCache cache;
  one->reserve(cache, 1);
  BOOST_CHECK_THROW(other->reserve(cache, 8), hotswap::protocol::ValueError);
  KvCache moved = std::move(cache);
  BOOST_TEST(cache.blocks().empty());
  BOOST_TEST(moved.blocks().size() == 1u);
  BOOST_TEST(one->free_blocks() == 3);
  one.reset();
  BOOST_CHECK_THROW(other->reserve(moved, 1),
                    hotswap::protocol::ValueError);  // its blocks' pool is gone
  moved.clear();                                     // nothing to give back to
  BOOST_TEST(moved.blocks().empty());
}

// A budget smaller than one block is refused when the model loads, naming a block's size.
BOOST_AUTO_TEST_CASE(a_budget_of_no_block_is_refused_naming_the_block_size) {
  try {
    KvBlockPool pool(tiny_shape(), 0);
    BOOST_FAIL("a pool without a block was made");
  } catch (const hotswap::protocol::ValueError& e) {
    const std::string message = e.what();
    BOOST_TEST(message.find("one block of 4 positions takes 512 bytes") != std::string::npos,
               message);
  }
}

BOOST_AUTO_TEST_SUITE_END()
