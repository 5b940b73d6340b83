// The ipc engine's choice of export per parameter, with vLLM's message when this GPU was
// offered none; CUDA itself is exercised by scripts/gpu-check.sh.
#include "receiver/ipc_engine.hpp"

#include <boost/test/unit_test.hpp>

#include "protocol/base64.hpp"
#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "transport/cuda_ipc.hpp"

using namespace hotswap;
using nlohmann::json;

namespace {

json handle(std::uint8_t fill, std::uint64_t offset, std::uint64_t size) {
  return {{"handle", protocol::base64_encode(std::vector<std::uint8_t>(64, fill))},
          {"offset_bytes", offset},
          {"size_bytes", size}};
}

json metadata() {
  return {{"names", {"a", "b"}}, {"dtype_names", {"float32", "float16"}}, {"shapes", {{4}, {3}}}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ipc_engine)

BOOST_AUTO_TEST_CASE(each_parameter_reads_the_export_offered_for_this_gpu) {
  json update = metadata();
  update["ipc_handles"] = {{{"gpu-0", handle(1, 256, 16)}, {"gpu-1", handle(2, 0, 16)}},
                           {{"gpu-0", handle(1, 512, 6)}, {"gpu-1", handle(2, 64, 6)}}};
  auto info = protocol::IpcUpdateInfo::from_json(update);
  auto sources = receiver::locate_ipc_sources(info, "gpu-1");
  BOOST_REQUIRE(sources.size() == 2u);
  BOOST_TEST(sources[0].handle->handle[0] == 2);
  BOOST_TEST(sources[1].offset == 64u);
  BOOST_TEST(sources[1].bytes == 6u);
  HOTSWAP_CHECK_THROW_MSG(receiver::locate_ipc_sources(info, "gpu-7"), protocol::ValueError,
                          "IPC handle not found for GPU UUID gpu-7. Available UUIDs: ['gpu-0', "
                          "'gpu-1']");
}

BOOST_AUTO_TEST_CASE(a_packed_chunk_lays_its_tensors_end_to_end_in_one_export) {
  json update = metadata();
  update["ipc_handles"] = {{"gpu-0", handle(3, 128, 64)}};
  update["tensor_sizes"] = {16, 6};
  auto sources = receiver::locate_ipc_sources(protocol::IpcUpdateInfo::from_json(update), "gpu-0");
  BOOST_TEST(sources[0].offset == 128u);
  BOOST_TEST(sources[1].offset == 144u);
  update["ipc_handles"] = {{"gpu-0", handle(3, 0, 20)}};  // 22 bytes of tensors in 20
  BOOST_CHECK_THROW(protocol::IpcUpdateInfo::from_json(update), protocol::ValueError);
}

BOOST_AUTO_TEST_CASE(gpus_are_named_as_torch_prints_their_uuid) {
  std::array<std::uint8_t, 16> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<std::uint8_t>(0xa0 + i);
  BOOST_TEST(transport::format_gpu_uuid(bytes) == "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
}

BOOST_AUTO_TEST_SUITE_END()
