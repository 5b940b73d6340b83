#include "protocol/nccl_info.hpp"

#include <boost/test/unit_test.hpp>

#include "protocol/base64.hpp"
#include "protocol/errors.hpp"
#include "test_support.hpp"

using namespace hotswap::protocol;
using nlohmann::json;

namespace {
json tcp_init() {
  return {{"master_address", "127.0.0.1"},
          {"master_port", 29500},
          {"rank_offset", 1},
          {"world_size", 3}};
}
std::string uid_b64(std::size_t n = 128) {
  return base64_encode(std::vector<std::uint8_t>(n, 7));
}
json update(json names, json dtypes, json shapes) {
  return {{"names", names}, {"dtype_names", dtypes}, {"shapes", shapes}};
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nccl_info)

BOOST_AUTO_TEST_CASE(init_info_from_vllms_stock_trainer_parses) {
  json payload = {{"master_address", "127.0.0.1"},
                  {"master_port", 29500},
                  {"rank_offset", 1},
                  {"world_size", 3},
                  {"packed", true},
                  {"packed_buffer_size_bytes", 1024},
                  {"packed_num_buffers", 3}};
  auto info = NcclInitInfo::from_json(payload);
  BOOST_TEST(*info.master_address == "127.0.0.1");
  BOOST_TEST(*info.master_port == 29500);
  BOOST_TEST(info.rank_offset == 1);
  BOOST_TEST(info.world_size == 3);
  BOOST_TEST(info.packing.packed);
  BOOST_TEST(info.packing.packed_buffer_size_bytes == 1024);
  BOOST_TEST(info.packing.packed_num_buffers == 3);
  BOOST_TEST(!info.uses_unique_id());
  BOOST_TEST(info.to_json() == payload);
}

BOOST_AUTO_TEST_CASE(e1_init_info_gets_worker_packing_defaults) {
  auto info = NcclInitInfo::from_json(tcp_init());
  BOOST_TEST(!info.packing.packed);
  BOOST_TEST(info.packing.packed_buffer_size_bytes == 1024 * 1024 * 1024);
  BOOST_TEST(info.packing.packed_num_buffers == 2);
}

BOOST_AUTO_TEST_CASE(unique_id_mode_decodes_128_bytes) {
  json payload = {{"nccl_unique_id_b64", uid_b64()}, {"rank_offset", 1}, {"world_size", 2}};
  auto info = NcclInitInfo::from_json(payload);
  BOOST_TEST(info.uses_unique_id());
  BOOST_TEST(info.nccl_unique_id.size() == 128u);
  BOOST_TEST(info.nccl_unique_id[5] == 7);
}

BOOST_AUTO_TEST_CASE(rendezvous_modes_are_mutually_exclusive_with_vllms_messages) {
  json both = tcp_init();
  both["nccl_unique_id_b64"] = uid_b64();
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(both), ValueError,
                          "NCCLWeightTransferInitInfo: pass nccl_unique_id_b64 OR "
                          "master_address/master_port, not both");
  json address_only = {{"master_address", "10.0.0.1"}, {"rank_offset", 1}, {"world_size", 2}};
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(address_only), ValueError,
                          "need nccl_unique_id_b64, or both master_address and master_port (got "
                          "master_address='10.0.0.1', master_port=None)");
  json bad_b64 = {{"nccl_unique_id_b64", "a-_b"}, {"rank_offset", 1}, {"world_size", 2}};
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(bad_b64), ValueError,
                          "nccl_unique_id_b64 is not valid standard base64 (URL-safe base64 is "
                          "not accepted)");
  json short_uid = {{"nccl_unique_id_b64", uid_b64(64)}, {"rank_offset", 1}, {"world_size", 2}};
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(short_uid), ValueError,
                          "nccl_unique_id_b64 must decode to 128 bytes, got 64");
}

BOOST_AUTO_TEST_CASE(unknown_key_missing_fields_and_wrong_types_are_named) {
  json extra = tcp_init();
  extra["master_prot"] = 1;
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(extra), ValueError,
                          "NCCLWeightTransferInitInfo.__init__() got an unexpected keyword "
                          "argument 'master_prot'");
  json missing = {{"master_address", "127.0.0.1"}, {"master_port", 29500}};
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(missing), ValueError,
                          "missing 2 required keyword-only arguments: 'rank_offset' and "
                          "'world_size'");
  json wrong = tcp_init();
  wrong["master_port"] = "29500";
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(wrong), ValueError,
                          "field `master_port` must be an integer, got string \"29500\"");
  wrong = tcp_init();
  wrong["packed"] = 1;
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(wrong), ValueError,
                          "field `packed` must be a boolean, got integer 1");
  wrong = tcp_init();
  wrong["world_size"] = 2.5;
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(wrong), ValueError,
                          "field `world_size` must be an integer, got number 2.5");
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(json::array()), ValueError,
                          "NCCLWeightTransferInitInfo expects a JSON object, got array");
}

BOOST_AUTO_TEST_CASE(values_that_would_fail_later_fail_here) {
  json bad = tcp_init();
  bad["master_port"] = 70000;
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(bad), ValueError,
                          "`master_port` must be in 1..65535, got 70000");
  bad = tcp_init();
  bad["rank_offset"] = 3;
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(bad), ValueError,
                          "`rank_offset` must be in 0..2 for world_size 3, got 3");
  bad = tcp_init();
  bad["world_size"] = 0;
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(bad), ValueError,
                          "`world_size` must be at least 1, got 0");
  bad = tcp_init();
  bad["packed_buffer_size_bytes"] = 0;
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(bad), ValueError,
                          "`packed_buffer_size_bytes` must be positive, got 0");
  bad = tcp_init();
  bad["packed_num_buffers"] = 0;
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(bad), ValueError,
                          "`packed_num_buffers` must be at least 1, got 0");
}

BOOST_AUTO_TEST_CASE(update_info_parses_and_round_trips) {
  json payload =
      update({"a", "b", "s"}, {"bfloat16", "float", "int64"}, {{2, 3}, {4}, json::array()});
  auto info = NcclUpdateInfo::from_json(payload);
  BOOST_REQUIRE_EQUAL(info.params.size(), 3u);
  BOOST_TEST(info.params[1].dtype == DType::kFloat32);  // alias resolved
  BOOST_TEST(info.params[0].nbytes() == 12u);
  BOOST_TEST(info.params[2].numel() == 1u);  // [] is a scalar
  json round = info.to_json();
  BOOST_TEST(round["dtype_names"][1] == "float32");
  BOOST_TEST(NcclUpdateInfo::from_json(round).params == info.params);
}

BOOST_AUTO_TEST_CASE(empty_lists_are_a_valid_zero_parameter_round) {
  auto info = NcclUpdateInfo::from_json(update(json::array(), json::array(), json::array()));
  BOOST_TEST(info.params.empty());
  // vLLM 0.33: every list defaults to empty ("the previous round's metadata").
  BOOST_TEST(NcclUpdateInfo::from_json(json::object()).params.empty());
  BOOST_TEST(NcclUpdateInfo::from_json({{"names", json::array()}}).params.empty());
}

BOOST_AUTO_TEST_CASE(update_info_length_mismatches_use_vllms_messages) {
  HOTSWAP_CHECK_THROW_MSG(NcclUpdateInfo::from_json(update({"a", "b"}, {"float32"}, {{1}, {1}})),
                          ValueError,
                          "`dtype_names` should be of the same size as `names`: got 1 and 2");
  HOTSWAP_CHECK_THROW_MSG(
      NcclUpdateInfo::from_json(update({"a", "b"}, {"float32", "float32"}, {{1}})), ValueError,
      "`shapes` should be of the same size as `names`: got 1 and 2");
}

BOOST_AUTO_TEST_CASE(unknown_dtype_and_bad_shapes_are_rejected_before_anything_moves) {
  HOTSWAP_CHECK_THROW_MSG(NcclUpdateInfo::from_json(update({"w"}, {"bfloat61"}, {{1}})), ValueError,
                          "'w' has unknown dtype name 'bfloat61'");
  HOTSWAP_CHECK_THROW_MSG(NcclUpdateInfo::from_json(update({"w"}, {"float32"}, {{2, -1}})),
                          ValueError, "field `shapes[0]` must be a list of non-negative integers");
  HOTSWAP_CHECK_THROW_MSG(NcclUpdateInfo::from_json(update({"w"}, {"float32"}, {3})), ValueError,
                          "field `shapes[0]` must be a list of integers, got integer 3");
  HOTSWAP_CHECK_THROW_MSG(
      NcclUpdateInfo::from_json(update({"w"}, {"float64"}, {{1LL << 40, 1LL << 30}})), ValueError,
      "overflows 64 bits");
  HOTSWAP_CHECK_THROW_MSG(NcclUpdateInfo::from_json(update({1}, {"float32"}, {{1}})), ValueError,
                          "field `names[0]` must be a string, got integer 1");
  HOTSWAP_CHECK_THROW_MSG(NcclUpdateInfo::from_json({{"names", {"w"}}}), ValueError,
                          "`dtype_names` should be of the same size as `names`: got 0 and 1");
}

BOOST_AUTO_TEST_CASE(e1_packing_in_update_info_overrides_the_handshake_for_that_round) {
  json payload = update({"a"}, {"float32"}, {{4}});
  payload["packed"] = true;
  payload["packed_buffer_size_bytes"] = 4096;
  payload["is_checkpoint_format"] = true;  // accepted and ignored
  auto info = NcclUpdateInfo::from_json(payload);
  PackingParams handshake;  // worker defaults: unpacked, 1 GiB, 2
  PackingParams round = info.packing(handshake);
  BOOST_TEST(round.packed);
  BOOST_TEST(round.packed_buffer_size_bytes == 4096);
  BOOST_TEST(round.packed_num_buffers == 2);
  // A round without overrides keeps the handshake's params.
  auto plain = NcclUpdateInfo::from_json(update({"a"}, {"float32"}, {{4}}));
  PackingParams agreed{true, 1024, 3};
  BOOST_TEST((plain.packing(agreed) == agreed));
}

BOOST_AUTO_TEST_SUITE_END()
