#include "protocol/chunk_plan.hpp"

#include <boost/test/unit_test.hpp>

#include "protocol/errors.hpp"
#include "test_support.hpp"

using namespace hotswap::protocol;

namespace {

// A uint8 parameter of `bytes` bytes, so sizes read directly.
ParamMeta bytes_param(const std::string& name, std::int64_t bytes) {
  return ParamMeta{name, DType::kUInt8, {bytes}};
}

// The parameter indices of each chunk.
std::vector<std::vector<std::size_t>> members(const ChunkPlan& plan) {
  std::vector<std::vector<std::size_t>> out;
  for (const auto& chunk : plan) {
    std::vector<std::size_t> ids;
    for (const auto& s : chunk.slices)
      ids.push_back(s.param_index);
    out.push_back(ids);
  }
  return out;
}

using Members = std::vector<std::vector<std::size_t>>;

}  // namespace

BOOST_AUTO_TEST_SUITE(chunk_plan)

BOOST_AUTO_TEST_CASE(nccl_empty_parameter_list_has_no_chunks) {
  BOOST_TEST(plan_nccl_chunks({}, 100).empty());
}

BOOST_AUTO_TEST_CASE(nccl_chunk_exactly_at_the_limit_stays_open) {
  std::vector<ParamMeta> p = {bytes_param("a", 60), bytes_param("b", 40), bytes_param("c", 1)};
  // 60 + 40 = 100 is not strictly past 100, so c joins and closes the chunk at 101.
  auto plan = plan_nccl_chunks(p, 100);
  BOOST_TEST(members(plan) == (Members{{0, 1, 2}}));
  BOOST_TEST(plan[0].size_bytes == 101u);
}

BOOST_AUTO_TEST_CASE(nccl_chunk_closes_after_tensor_that_crosses_the_limit) {
  std::vector<ParamMeta> p = {bytes_param("a", 60), bytes_param("b", 41), bytes_param("c", 10),
                              bytes_param("d", 10)};
  auto plan = plan_nccl_chunks(p, 100);
  BOOST_TEST(members(plan) == (Members{{0, 1}, {2, 3}}));
  BOOST_TEST(plan[0].size_bytes == 101u);
  BOOST_TEST(plan[1].size_bytes == 20u);  // the final chunk holds the remainder
}

BOOST_AUTO_TEST_CASE(nccl_oversize_tensor_rides_alone_or_ends_its_chunk) {
  std::vector<ParamMeta> p = {bytes_param("big", 500), bytes_param("a", 10), bytes_param("b", 10),
                              bytes_param("huge", 900), bytes_param("c", 1)};
  auto plan = plan_nccl_chunks(p, 100);
  BOOST_TEST(members(plan) == (Members{{0}, {1, 2, 3}, {4}}));
  BOOST_TEST(plan[1].size_bytes == 920u);
}

BOOST_AUTO_TEST_CASE(nccl_zero_byte_tensors_ride_along) {
  std::vector<ParamMeta> p = {bytes_param("empty0", 0), bytes_param("a", 101),
                              bytes_param("empty1", 0), bytes_param("empty2", 0)};
  auto plan = plan_nccl_chunks(p, 100);
  // The trailing empties form a final zero-byte chunk: a count-0 broadcast in vLLM.
  BOOST_TEST(members(plan) == (Members{{0, 1}, {2, 3}}));
  BOOST_TEST(plan[1].size_bytes == 0u);
}

BOOST_AUTO_TEST_CASE(nccl_offsets_are_prefix_sums_without_padding) {
  std::vector<ParamMeta> p = {
      ParamMeta{"a", DType::kBFloat16, {3}},  // 6 bytes: the next float32 starts misaligned
      ParamMeta{"b", DType::kFloat32, {2, 2}},
      ParamMeta{"s", DType::kInt64, {}},  // a scalar: one element
  };
  auto plan = plan_nccl_chunks(p, 1 << 20);
  BOOST_REQUIRE_EQUAL(plan.size(), 1u);
  BOOST_TEST(plan[0].slices[0].offset == 0u);
  BOOST_TEST(plan[0].slices[1].offset == 6u);
  BOOST_TEST(plan[0].slices[1].size == 16u);
  BOOST_TEST(plan[0].slices[2].offset == 22u);
  BOOST_TEST(plan[0].slices[2].size == 8u);
  BOOST_TEST(plan[0].size_bytes == 30u);
}

BOOST_AUTO_TEST_CASE(ipc_flushes_before_overflowing) {
  std::vector<ParamMeta> p = {bytes_param("a", 60), bytes_param("b", 41), bytes_param("c", 40)};
  auto plan = plan_ipc_chunks(p, 100);
  BOOST_TEST(members(plan) == (Members{{0}, {1, 2}}));
  BOOST_TEST(plan[0].size_bytes == 60u);
  BOOST_TEST(plan[1].slices[1].offset == 41u);
}

BOOST_AUTO_TEST_CASE(ipc_chunk_may_fill_the_buffer_exactly) {
  std::vector<ParamMeta> p = {bytes_param("a", 60), bytes_param("b", 40), bytes_param("c", 1)};
  auto plan = plan_ipc_chunks(p, 100);
  BOOST_TEST(members(plan) == (Members{{0, 1}, {2}}));
  BOOST_TEST(plan[0].size_bytes == 100u);
}

BOOST_AUTO_TEST_CASE(ipc_tensor_larger_than_the_buffer_is_vllms_value_error) {
  std::vector<ParamMeta> p = {bytes_param("a", 10), bytes_param("model.big", 101)};
  HOTSWAP_CHECK_THROW_MSG(plan_ipc_chunks(p, 100), ValueError,
                          "Tensor 'model.big' has size 101 bytes, which exceeds "
                          "buffer_size_bytes=100. Increase buffer_size_bytes to at least 101.");
}

BOOST_AUTO_TEST_CASE(ipc_zero_byte_tensors_and_empty_lists) {
  BOOST_TEST(plan_ipc_chunks({}, 100).empty());
  std::vector<ParamMeta> p = {bytes_param("a", 100), bytes_param("e", 0), bytes_param("b", 1)};
  // A zero-byte tensor never overflows, so it joins the full chunk.
  BOOST_TEST(members(plan_ipc_chunks(p, 100)) == (Members{{0, 1}, {2}}));
}

BOOST_AUTO_TEST_SUITE_END()
