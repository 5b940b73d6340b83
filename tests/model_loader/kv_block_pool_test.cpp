#include "model_loader/kv_cache.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <boost/test/unit_test.hpp>

using hotswap::model_loader::KvCache;

BOOST_AUTO_TEST_SUITE(kv_cache)

// A step reserves before it reads a weight: the capacity at least doubles (16 at first), and
// what the cache held is still there after it grows.
BOOST_AUTO_TEST_CASE(reserve_grows_by_doubling_and_keeps_what_is_filled) {
  KvCache cache;
  const auto options = at::TensorOptions().dtype(at::kFloat);
  cache.reserve(3, /*layers=*/2, /*kv_heads=*/2, /*head_dim=*/4, options);
  BOOST_TEST(cache.keys.size() == 2u);
  BOOST_TEST(cache.capacity() == 16);
  at::Tensor filled = at::arange(2 * 3 * 4, options).reshape({2, 3, 4});
  cache.keys[1].narrow(1, 0, 3).copy_(filled);
  cache.length = 3;

  cache.reserve(13, 2, 2, 4, options);  // 16 positions: room already
  BOOST_TEST(cache.capacity() == 16);
  cache.reserve(14, 2, 2, 4, options);  // 17: doubles
  BOOST_TEST(cache.capacity() == 32);
  BOOST_TEST(at::equal(cache.keys[1].narrow(1, 0, 3), filled));
  cache.reserve(100, 2, 2, 4, options);  // more than double: exactly what is needed
  BOOST_TEST(cache.capacity() == 103);
  BOOST_TEST(at::equal(cache.keys[1].narrow(1, 0, 3), filled));
}

BOOST_AUTO_TEST_SUITE_END()
