// Payload validation of the backends other than nccl: sparse_nccl, ipc, shm, disk, and the
// worker's --weight-transfer-config.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "protocol/base64.hpp"
#include "protocol/disk_info.hpp"
#include "protocol/errors.hpp"
#include "protocol/ipc_info.hpp"
#include "protocol/shm_info.hpp"
#include "protocol/sparse_nccl_info.hpp"
#include "protocol/weight_transfer_config.hpp"
#include "test_support.hpp"

using namespace hotswap::protocol;
using nlohmann::json;

namespace {

json sparse(json num_updates) {
  return {{"names", {"w", "b"}},
          {"dtype_names", {"float32", "bfloat16"}},
          {"shapes", {{30}, {2, 2}}},
          {"num_updates_list", num_updates}};
}

json handle(std::uint64_t size, std::size_t raw_bytes = 64) {
  return {{"handle", base64_encode(std::vector<std::uint8_t>(raw_bytes, 1))},
          {"offset_bytes", 0},
          {"size_bytes", size}};
}

json ipc_base() {
  return {{"names", {"a", "b"}}, {"dtype_names", {"float32", "float16"}}, {"shapes", {{4}, {3}}}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(backend_info)

BOOST_AUTO_TEST_CASE(sparse_update_info_parses) {
  auto info = SparseNcclUpdateInfo::from_json(sparse({3, 0}));
  BOOST_TEST(info.num_updates_list == (std::vector<std::int64_t>{3, 0}));
  BOOST_TEST(info.params[1].dtype == DType::kBFloat16);
  BOOST_TEST(SparseNcclUpdateInfo::from_json(info.to_json()).num_updates_list ==
             info.num_updates_list);
}

BOOST_AUTO_TEST_CASE(sparse_update_info_uses_vllms_messages) {
  HOTSWAP_CHECK_THROW_MSG(SparseNcclUpdateInfo::from_json(sparse(json::array())), ValueError,
                          "`num_updates_list` cannot be empty for sparse updates");
  HOTSWAP_CHECK_THROW_MSG(SparseNcclUpdateInfo::from_json(sparse({1})), ValueError,
                          "`num_updates_list` should be of the same size as `names`: got 1 and 2");
  HOTSWAP_CHECK_THROW_MSG(SparseNcclUpdateInfo::from_json(sparse({1, -1})), ValueError,
                          "Sparse `num_updates_list` entries must be non-negative");
  HOTSWAP_CHECK_THROW_MSG(SparseNcclUpdateInfo::from_json(sparse({31, 0})), ValueError,
                          "'w' has 31 updates but shape [30] holds only 30 elements");
  json no_list = sparse({1, 1});
  no_list.erase("num_updates_list");
  HOTSWAP_CHECK_THROW_MSG(SparseNcclUpdateInfo::from_json(no_list), ValueError,
                          "missing 1 required positional argument: 'num_updates_list'");
  json mismatch = sparse({1, 1});
  mismatch["dtype_names"] = {"float32"};
  HOTSWAP_CHECK_THROW_MSG(SparseNcclUpdateInfo::from_json(mismatch), ValueError,
                          "`dtype_names` should be of the same size as `names`: got 1 and 2");
}

BOOST_AUTO_TEST_CASE(src_names_the_broadcaster_of_an_update_as_vllm_034_sends_it) {
  json nccl = {{"names", {"a", "b"}},
               {"dtype_names", {"float32", "bfloat16"}},
               {"shapes", {{4}, {30}}},
               {"src", 1}};
  auto info = NcclUpdateInfo::from_json(nccl);
  BOOST_TEST(info.src == 1);
  BOOST_TEST(NcclUpdateInfo::from_json(info.to_json()).src == 1);
  // Absent: 0, and a src of 0 is not written (vLLM's trainer deletes it: 0.33's payload).
  nccl.erase("src");
  BOOST_TEST(NcclUpdateInfo::from_json(nccl).src == 0);
  info.src = 0;
  BOOST_TEST(!info.to_json().contains("src"));
  // hotswap's former per-name extension is no longer accepted: one wire, vLLM's.
  nccl["sender_ranks"] = {0, 1};
  BOOST_CHECK_THROW(NcclUpdateInfo::from_json(nccl), ValueError);
  // The range is checked once the group is known, with vLLM's message.
  HOTSWAP_CHECK_THROW_MSG(check_update_src(2, 2), ValueError,
                          "NCCL update src must be a sender rank in [0, 2), got 2.");
  HOTSWAP_CHECK_THROW_MSG(check_update_src(-1, 1), ValueError,
                          "NCCL update src must be a sender rank in [0, 1), got -1.");
  BOOST_CHECK_NO_THROW(check_update_src(1, 2));
  // Sparse updates come from rank 0 alone.
  json sparse_with_src = sparse({3, 0});
  sparse_with_src["src"] = 1;
  BOOST_CHECK_THROW(SparseNcclUpdateInfo::from_json(sparse_with_src), ValueError);
}

BOOST_AUTO_TEST_CASE(use_load_plan_and_metadata_as_every_vllm_034_trainer_sends_them) {
  json init = {{"master_address", "127.0.0.1"},
               {"master_port", 29500},
               {"rank_offset", 1},
               {"world_size", 2},
               {"use_load_plan", false}};
  auto plain = NcclInitInfo::from_json(init);  // every stock 0.34 trainer sends this
  BOOST_TEST(!plain.use_load_plan);
  BOOST_TEST(!plain.metadata.has_value());
  BOOST_TEST(!plain.to_json().contains("use_load_plan"));  // a 0.33 worker refuses the key
  init["use_load_plan"] = true;
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(init), ValueError,
                          "use_load_plan needs the trainer's metadata in the init info");
  init["metadata"] = json::array(
      {json::array({"w", "bfloat16", {2, 3}}), json::array({"b", "float32", json::array()})});
  auto planned = NcclInitInfo::from_json(init);
  BOOST_TEST(planned.use_load_plan);
  BOOST_REQUIRE(planned.metadata.has_value());
  BOOST_TEST(planned.metadata->size() == 2u);
  BOOST_TEST((NcclInitInfo::from_json(planned.to_json()).metadata == planned.metadata));
  init["metadata"] = json::array({json::array({"w", "bfloat16"})});
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(init), ValueError,
                          "`metadata`[0] must be [name, dtype_name, shape]");
  init["metadata"] = json::array({json::array({"w", "complex1024", {1}})});
  HOTSWAP_CHECK_THROW_MSG(NcclInitInfo::from_json(init), ValueError, "unknown dtype name");
  // vLLM tests the unique id with bool(): an empty one is no id.
  json empty_id = {{"nccl_unique_id_b64", ""},
                   {"master_address", "127.0.0.1"},
                   {"master_port", 29500},
                   {"rank_offset", 1},
                   {"world_size", 2}};
  BOOST_TEST(!NcclInitInfo::from_json(empty_id).uses_unique_id());

  // Each update is checked against the manifest with vLLM's wording.
  const auto& manifest = *planned.metadata;
  BOOST_CHECK_NO_THROW(check_against_load_plan(manifest, {manifest[0]}));
  auto renamed = manifest[0];
  renamed.name = "x";
  HOTSWAP_CHECK_THROW_MSG(check_against_load_plan(manifest, {renamed}), ValueError,
                          "'x' sent as (torch.bfloat16, [2, 3]) was not declared in the metadata "
                          "sent at init; with use_load_plan, re-init the engine to re-plan");
  auto reshaped = manifest[0];
  reshaped.shape = {3, 2};
  HOTSWAP_CHECK_THROW_MSG(check_against_load_plan(manifest, {reshaped}), ValueError,
                          "'w' sent as (torch.bfloat16, [3, 2]) was declared at init as "
                          "(torch.bfloat16, [2, 3])");
}

BOOST_AUTO_TEST_CASE(the_broadcaster_plan_and_its_ownership_errors_are_vllm_034s) {
  auto param = [](std::string name, std::optional<std::vector<std::int64_t>> owners) {
    ParamMeta m{std::move(name), DType::kFloat32, {4, 2}};
    m.owners = std::move(owners);
    return m;
  };
  // Rank 0 and each first owner broadcast; src indexes them.
  auto plan = plan_broadcasters({param("a", std::vector<std::int64_t>{0, 1}),
                                 param("b", std::vector<std::int64_t>{2, 3}),
                                 param("c", std::vector<std::int64_t>{2})});
  BOOST_TEST(plan.group_ranks == (std::vector<std::int64_t>{0, 2}),
             boost::test_tools::per_element());
  BOOST_TEST(plan.src == (std::vector<std::int64_t>{0, 1, 1}), boost::test_tools::per_element());
  // Without owners: rank 0 alone, as 0.33.
  auto single = plan_broadcasters({param("a", std::nullopt), param("b", std::nullopt)});
  BOOST_TEST(single.group_ranks == (std::vector<std::int64_t>{0}),
             boost::test_tools::per_element());
  // Rank 0 after another owner; a parameter with no owners beside several broadcasters; a rank
  // under two broadcasters.
  HOTSWAP_CHECK_THROW_MSG(plan_broadcasters({param("a", std::vector<std::int64_t>{1, 0})}),
                          ValueError,
                          "parameter 'a' has owners (1, 0): rank 0 only gathers in its own turn");
  HOTSWAP_CHECK_THROW_MSG(
      plan_broadcasters({param("a", std::nullopt), param("b", std::vector<std::int64_t>{1})}),
      ValueError,
      "parameter 'a' has no owners, so every rank owns it, but the source has several "
      "broadcasting ranks [0, 1]. Every parameter must declare its owners.");
  HOTSWAP_CHECK_THROW_MSG(plan_broadcasters({param("a", std::vector<std::int64_t>{0, 1}),
                                             param("b", std::vector<std::int64_t>{1})}),
                          ValueError, "rank 1 owns parameters broadcast by ranks 0 and 1");
  // ParamMeta's own checks.
  auto bad = param("a", std::vector<std::int64_t>{1, 1});
  HOTSWAP_CHECK_THROW_MSG(check_ownership(bad), ValueError,
                          "parameter 'a' owners must be distinct non-negative ranks, got (1, 1)");
  auto meshed = param("a", std::vector<std::int64_t>{1, 2, 3, 4});
  meshed.mesh_shape = {2, 3};
  HOTSWAP_CHECK_THROW_MSG(check_ownership(meshed), ValueError,
                          "parameter 'a' mesh_shape (2, 3) does not cover its 4 owners");
  meshed.mesh_shape = {2, 2};
  meshed.placements = {Placement::shard(0)};
  HOTSWAP_CHECK_THROW_MSG(check_ownership(meshed), ValueError,
                          "parameter 'a' has 1 placements for a 2-D mesh");
  meshed.placements = {Placement::shard(2), Placement::replicate()};
  HOTSWAP_CHECK_THROW_MSG(check_ownership(meshed), ValueError,
                          "parameter 'a' shards dim 2 of a 2-D tensor");
  meshed.placements = {Placement::replicate(), Placement::replicate()};
  check_ownership(meshed);
  BOOST_TEST(meshed.placements.empty());  // all replicated reads as none, as vLLM normalizes
  auto defaulted = param("a", std::vector<std::int64_t>{3, 5});
  check_ownership(defaulted);
  BOOST_TEST(defaulted.mesh_shape == (std::vector<std::int64_t>{2}),
             boost::test_tools::per_element());
  auto unowned = param("a", std::nullopt);
  unowned.mesh_shape = {1};
  HOTSWAP_CHECK_THROW_MSG(check_ownership(unowned), ValueError,
                          "parameter 'a' declares a mesh or placements without owners");
}

BOOST_AUTO_TEST_CASE(ipc_unpacked_handles_parse_and_round_trip) {
  json payload = ipc_base();
  payload["ipc_handles"] = {{{"GPU-1", handle(16)}}, {{"GPU-1", handle(6)}, {"GPU-2", handle(6)}}};
  auto info = IpcUpdateInfo::from_json(payload);
  BOOST_TEST(!info.is_packed());
  BOOST_REQUIRE_EQUAL(info.handles.size(), 2u);
  BOOST_TEST(info.handles[1].size() == 2u);
  BOOST_TEST(info.handles[0].at("GPU-1").handle.size() == 64u);
  BOOST_TEST(IpcUpdateInfo::from_json(info.to_json()).handles == info.handles);
  // `ipc_handles_pickled: null` alongside `ipc_handles` is accepted, as in vLLM.
  payload["ipc_handles_pickled"] = nullptr;
  BOOST_CHECK_NO_THROW(IpcUpdateInfo::from_json(payload));
}

BOOST_AUTO_TEST_CASE(ipc_packed_chunk_needs_tensor_sizes_that_match) {
  json payload = ipc_base();
  payload["ipc_handles"] = {{"GPU-1", handle(1024)}};
  HOTSWAP_CHECK_THROW_MSG(IpcUpdateInfo::from_json(payload), ValueError,
                          "`tensor_sizes` is required when packed=True");
  payload["tensor_sizes"] = {16, 6};
  auto info = IpcUpdateInfo::from_json(payload);
  BOOST_TEST(info.is_packed());
  BOOST_TEST(info.tensor_sizes == (std::vector<std::uint64_t>{16, 6}));
  payload["tensor_sizes"] = {16, 5};
  HOTSWAP_CHECK_THROW_MSG(IpcUpdateInfo::from_json(payload), ValueError,
                          "`tensor_sizes[1]` is 5 bytes but 'b' (float16 [3]) has 6");
  payload["tensor_sizes"] = {16, 6};
  payload["ipc_handles"] = {{"GPU-1", handle(20)}};
  HOTSWAP_CHECK_THROW_MSG(IpcUpdateInfo::from_json(payload), ValueError,
                          "add up to 22 bytes but the buffer exported for GPU-1 holds 20");
  // Found by fuzzing: four sizes of 2^62 wrapped the total to 0, under any buffer.
  const std::int64_t huge = 1ll << 62;
  payload = {{"names", {"a", "b", "c", "d"}},
             {"dtype_names", {"int8", "int8", "int8", "int8"}},
             {"shapes", {{huge}, {huge}, {huge}, {huge}}},
             {"tensor_sizes", {huge, huge, huge, huge}},
             {"ipc_handles", {{"GPU-1", handle(0)}}}};
  HOTSWAP_CHECK_THROW_MSG(IpcUpdateInfo::from_json(payload), ValueError,
                          "add up to more than 2^64 bytes");
}

BOOST_AUTO_TEST_CASE(ipc_validation_uses_vllms_messages) {
  json both = ipc_base();
  both["ipc_handles"] = json::array();
  both["ipc_handles_pickled"] = "gASV";
  HOTSWAP_CHECK_THROW_MSG(IpcUpdateInfo::from_json(both), ValueError,
                          "Cannot specify both `ipc_handles` and `ipc_handles_pickled`");
  json pickled = ipc_base();
  pickled["ipc_handles_pickled"] = "gASV";
  HOTSWAP_CHECK_THROW_MSG(IpcUpdateInfo::from_json(pickled), ValueError,
                          "hotswap never deserializes `ipc_handles_pickled`");
  HOTSWAP_CHECK_THROW_MSG(IpcUpdateInfo::from_json(ipc_base()), ValueError,
                          "Either `ipc_handles` or `ipc_handles_pickled` must be provided");
  json short_list = ipc_base();
  short_list["ipc_handles"] = {{{"GPU-1", handle(16)}}};
  HOTSWAP_CHECK_THROW_MSG(IpcUpdateInfo::from_json(short_list), ValueError,
                          "`ipc_handles` should be of the same size as `names`: got 1 and 2");
  json bad_handle = ipc_base();
  bad_handle["ipc_handles"] = {{{"GPU-1", handle(16, 12)}}, {{"GPU-1", handle(6)}}};
  HOTSWAP_CHECK_THROW_MSG(IpcUpdateInfo::from_json(bad_handle), ValueError,
                          "must decode to 64 bytes (a cudaIpcMemHandle_t), got 12");
  json wrong_size = ipc_base();
  wrong_size["ipc_handles"] = {{{"GPU-1", handle(15)}}, {{"GPU-1", handle(6)}}};
  HOTSWAP_CHECK_THROW_MSG(IpcUpdateInfo::from_json(wrong_size), ValueError,
                          "exports 15 bytes but 'a' has 16");
  json empty = {{"names", json::array()},
                {"dtype_names", json::array()},
                {"shapes", json::array()},
                {"ipc_handles", json::array()}};
  BOOST_CHECK_NO_THROW(IpcUpdateInfo::from_json(empty));
}

BOOST_AUTO_TEST_CASE(ipc_init_info_is_packed_or_not) {
  BOOST_TEST(IpcInitInfo::from_json({{"packed", true}}).packed);
  BOOST_TEST(!IpcInitInfo::from_json(json::object()).packed);
  HOTSWAP_CHECK_THROW_MSG(IpcInitInfo::from_json({{"master_port", 1}}), ValueError,
                          "got an unexpected keyword argument 'master_port'");
}

BOOST_AUTO_TEST_CASE(shm_init_info_names_posix_segments) {
  json payload = {{"segment_names", {"/hotswap-1-0", "/hotswap-1-1"}},
                  {"packed_buffer_size_bytes", 1 << 20}};
  auto info = ShmInitInfo::from_json(payload);
  BOOST_TEST(info.segment_names.size() == 2u);
  BOOST_TEST(info.to_json() == payload);
  payload["segment_names"] = {"hotswap"};
  HOTSWAP_CHECK_THROW_MSG(ShmInitInfo::from_json(payload), ValueError,
                          "`segment_names[0]` must be a hotswap shared-memory name");
  // Only hotswap's own segments: a client cannot point the worker at another program's.
  for (const char* other : {"/x", "/hotswap-", "/hotswapx-1", "/dev-shm-secret"}) {
    payload["segment_names"] = {other};
    HOTSWAP_CHECK_THROW_MSG(ShmInitInfo::from_json(payload), ValueError, "the prefix /hotswap-");
  }
  payload["segment_names"] = {"/a/b"};
  HOTSWAP_CHECK_THROW_MSG(ShmInitInfo::from_json(payload), ValueError, "got '/a/b'");
  payload["segment_names"] = json::array();
  HOTSWAP_CHECK_THROW_MSG(ShmInitInfo::from_json(payload), ValueError,
                          "`segment_names` must name at least one shared-memory buffer");
  json zero = {{"segment_names", {"/hotswap-x"}}, {"packed_buffer_size_bytes", 0}};
  HOTSWAP_CHECK_THROW_MSG(ShmInitInfo::from_json(zero), ValueError,
                          "`packed_buffer_size_bytes` must be positive, got 0");
}

BOOST_AUTO_TEST_CASE(shm_update_info_is_the_metadata_of_the_round) {
  auto info = ShmUpdateInfo::from_json({{"names", {"w"}},
                                        {"dtype_names", {"bfloat16"}},
                                        {"shapes", {{2, 8}}},
                                        {"first_sequence", 5}});
  BOOST_TEST(info.params[0].nbytes() == 32u);
  BOOST_TEST(info.first_sequence == 5);
  BOOST_TEST(ShmUpdateInfo::from_json(info.to_json()).first_sequence == 5);
  HOTSWAP_CHECK_THROW_MSG(
      ShmUpdateInfo::from_json(
          {{"names", {"w"}}, {"dtype_names", {"bf16"}}, {"shapes", {{1}}}, {"first_sequence", 1}}),
      ValueError, "'w' has unknown dtype name 'bf16'");
  HOTSWAP_CHECK_THROW_MSG(ShmUpdateInfo::from_json(
                              {{"names", {"w"}}, {"dtype_names", {"bfloat16"}}, {"shapes", {{1}}}}),
                          ValueError, "missing 1 required positional argument: 'first_sequence'");
}

BOOST_AUTO_TEST_CASE(shm_arena_offsets_say_which_tensors_are_read_in_place) {
  json init = {{"segment_names", {"/hotswap-1-0"}}, {"arena_name", "/hotswap-1-arena-0"}};
  BOOST_TEST(*ShmInitInfo::from_json(init).arena_name == "/hotswap-1-arena-0");
  init["arena_name"] = "arena";
  HOTSWAP_CHECK_THROW_MSG(ShmInitInfo::from_json(init), ValueError,
                          "`arena_name` must be a hotswap shared-memory name");

  json update = {{"names", {"a", "b", "c"}},
                 {"dtype_names", {"bfloat16", "float32", "bfloat16"}},
                 {"shapes", {{4}, {2}, {3}}},
                 {"first_sequence", 1},
                 {"arena_offsets", {0, -1, 64}}};
  auto info = ShmUpdateInfo::from_json(update);
  BOOST_TEST(info.in_arena(0));
  BOOST_TEST(!info.in_arena(1));
  std::vector<std::size_t> indices;
  auto buffered = info.buffered_params(&indices);
  BOOST_TEST(buffered.size() == 1u);
  BOOST_TEST(buffered[0].name == "b");
  BOOST_TEST(indices == std::vector<std::size_t>{1});
  BOOST_TEST(info.to_json() == update);
  // Without offsets every tensor travels in the buffers.
  update.erase("arena_offsets");
  BOOST_TEST(ShmUpdateInfo::from_json(update).buffered_params().size() == 3u);

  update["arena_offsets"] = {0, -1};
  HOTSWAP_CHECK_THROW_MSG(ShmUpdateInfo::from_json(update), ValueError,
                          "`arena_offsets` has 2 entries but `names` has 3");
  update["arena_offsets"] = {0, -2, 64};
  HOTSWAP_CHECK_THROW_MSG(ShmUpdateInfo::from_json(update), ValueError,
                          "`arena_offsets[1]` (b) must be a byte offset or -1");
  update["arena_offsets"] = {0, -1, 63};
  HOTSWAP_CHECK_THROW_MSG(ShmUpdateInfo::from_json(update), ValueError,
                          "`arena_offsets[2]` (c) is 63, not aligned for its dtype bfloat16");
}

BOOST_AUTO_TEST_CASE(a_shm_round_names_its_stream_window_only_when_it_uses_one) {
  json update = {
      {"names", {"a"}}, {"dtype_names", {"bfloat16"}}, {"shapes", {{4}}}, {"first_sequence", 3}};
  auto whole = ShmUpdateInfo::from_json(update);
  BOOST_TEST(whole.stream_window_bytes == 0);
  // Absent when 0: a worker of an older build refuses fields it does not know.
  BOOST_TEST(!whole.to_json().contains("stream_window_bytes"));
  update["stream_window_bytes"] = 2097152;
  auto windowed = ShmUpdateInfo::from_json(update);
  BOOST_TEST(windowed.stream_window_bytes == 2097152);
  BOOST_TEST(windowed.to_json() == update);
  update["stream_window_bytes"] = -1;
  HOTSWAP_CHECK_THROW_MSG(ShmUpdateInfo::from_json(update), ValueError,
                          "`stream_window_bytes` must be 0 (whole chunks) or a window's size");
  update["stream_window_bytes"] = "2M";
  BOOST_CHECK_THROW(ShmUpdateInfo::from_json(update), ValueError);
}

BOOST_AUTO_TEST_CASE(disk_update_info_checks_the_directory_with_vllms_messages) {
  hotswap::testing::TempDir dir;
  HOTSWAP_CHECK_THROW_MSG(DiskUpdateInfo::from_json({{"path", ""}}), ValueError,
                          "`path` must be a non-empty absolute local directory");
  HOTSWAP_CHECK_THROW_MSG(DiskUpdateInfo::from_json({{"path", "relative/dir"}}), ValueError,
                          "`path` must be an absolute local directory");
  std::string missing = (dir.path / "missing").string();
  HOTSWAP_CHECK_THROW_MSG(DiskUpdateInfo::from_json({{"path", missing}}), ValueError,
                          "Shared-disk checkpoint path must be a local directory: " + missing);
  HOTSWAP_CHECK_THROW_MSG(
      DiskUpdateInfo::from_json({{"path", dir.path.string()}}), ValueError,
      "Shared-disk checkpoint directory contains no safetensors files: " + dir.path.string());
  std::ofstream(dir.path / "model.safetensors") << "x";
  BOOST_TEST(DiskUpdateInfo::from_json({{"path", dir.path.string()}}).path == dir.path.string());
  HOTSWAP_CHECK_THROW_MSG(DiskUpdateInfo::from_json({{"path", 3}}), ValueError,
                          "field `path` must be a string, got integer 3");
  HOTSWAP_CHECK_THROW_MSG(DiskInitInfo::from_json({{"path", "/x"}}), ValueError,
                          "got an unexpected keyword argument 'path'");
  BOOST_CHECK_NO_THROW(DiskInitInfo::from_json(json::object()));
}

BOOST_AUTO_TEST_CASE(weight_transfer_config_selects_only_the_backend) {
  BOOST_TEST(WeightTransferConfig::from_json(json::object()).backend == "nccl");
  BOOST_TEST(WeightTransferConfig::from_json({{"backend", "gloo"}}).backend == "gloo");
  HOTSWAP_CHECK_THROW_MSG(WeightTransferConfig::from_json({{"backend", "gloo"}, {"packed", true}}),
                          ValueError, "got an unexpected keyword argument 'packed'");
  HOTSWAP_CHECK_THROW_MSG(WeightTransferConfig::from_json({{"backend", 1}}), ValueError,
                          "field `backend` must be a string");
}

BOOST_AUTO_TEST_SUITE_END()
