#include "trainer_sdk/shared_weight_arena.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>

#include <filesystem>

#include "protocol/errors.hpp"
#include "test_support.hpp"

using namespace hotswap;

namespace {
bool segment_exists(const std::string& name) {
  return std::filesystem::exists("/dev/shm" + name);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(shared_weight_arena)

BOOST_AUTO_TEST_CASE(tensors_are_aligned_registered_and_found_by_name) {
  trainer_sdk::SharedWeightArena arena(1024);
  BOOST_TEST(segment_exists(arena.name()));
  at::Tensor a = arena.allocate("a", {3}, at::kBFloat16);  // 6 bytes, then padding
  at::Tensor b = arena.copy_in("b", at::arange(4, at::TensorOptions().dtype(at::kFloat)));
  // After the fence (the data area's first 64 bytes), each on a cache line.
  BOOST_TEST(arena.find("a")->offset == 64);
  BOOST_TEST(arena.find("b")->offset == 128);
  BOOST_TEST(arena.find("b")->meta.nbytes() == 16u);
  BOOST_TEST(arena.find("c") == nullptr);
  BOOST_TEST(arena.used() == 128u);
  BOOST_TEST(at::equal(b, at::arange(4, at::TensorOptions().dtype(at::kFloat))));
  BOOST_TEST(arena.holds("b", b));
  BOOST_TEST(!arena.holds("b", b.clone()));  // the same values elsewhere are not the arena's
  BOOST_TEST(!arena.holds("a", b));

  HOTSWAP_CHECK_THROW_MSG(arena.allocate("a", {1}, at::kFloat), protocol::ValueError,
                          "already holds a tensor named 'a'");
  HOTSWAP_CHECK_THROW_MSG(arena.allocate("big", {1000}, at::kFloat), protocol::ValueError,
                          "has 896 bytes left, 'big' needs 4000");
  BOOST_TEST(trainer_sdk::SharedWeightArena::bytes_for(std::vector<protocol::ParamMeta>{
                 arena.find("a")->meta, arena.find("b")->meta}) == 128u);
}

BOOST_AUTO_TEST_CASE(the_segment_lives_as_long_as_its_tensors) {
  at::Tensor kept;
  std::string name;
  {
    trainer_sdk::SharedWeightArena arena(256);
    name = arena.name();
    kept = arena.copy_in("w", at::arange(8, at::TensorOptions().dtype(at::kFloat)));
  }
  BOOST_TEST(kept[7].item<float>() == 7.0f);  // still mapped
  BOOST_TEST(segment_exists(name));
  kept.reset();
  BOOST_TEST(!segment_exists(name));  // unlinked with the last reference
}

BOOST_AUTO_TEST_SUITE_END()
