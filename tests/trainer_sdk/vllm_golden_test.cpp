// hotswap's planner, packer and grouping against vLLM's own code: vectors made by
// tests/golden/make_vllm_golden.py with vLLM from PyPI.
#include <boost/test/unit_test.hpp>

#include <ATen/ops/empty.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "protocol/base64.hpp"
#include "protocol/chunk_plan.hpp"
#include "protocol/layerwise_groups.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "transport/torch_dtype.hpp"

using namespace hotswap;
using nlohmann::json;

namespace {

json golden(const std::string& file) {
  return json::parse(std::ifstream(std::string(HOTSWAP_GOLDEN_DIR) + "/vllm/" + file));
}

std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<std::uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vllm_golden)

BOOST_AUTO_TEST_CASE(chunk_plans_and_packed_bytes_match_vllms_pack_tensors) {
  json g = golden("packing.json");
  std::vector<protocol::ParamMeta> meta;
  std::vector<at::Tensor> tensors;
  for (const auto& p : g["params"]) {
    protocol::ParamMeta m{p["name"], protocol::dtype_from_name(p["dtype"].get<std::string>()),
                          p["shape"].get<std::vector<std::int64_t>>()};
    auto bytes = from_hex(p["bytes_hex"]);
    at::Tensor t =
        at::empty(m.shape, at::TensorOptions().dtype(transport::to_scalar_type(m.dtype)));
    if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
    meta.push_back(m);
    tensors.push_back(t);
  }
  for (const auto& [buffer, chunks] : g["plans"].items()) {
    auto plan = protocol::plan_nccl_chunks(meta, std::stoull(buffer));
    BOOST_REQUIRE_MESSAGE(plan.size() == chunks.size(), "buffer " << buffer);
    for (std::size_t c = 0; c < plan.size(); ++c) {
      std::vector<std::string> names;
      std::vector<std::uint64_t> sizes;
      for (const auto& s : plan[c].slices) {
        names.push_back(meta[s.param_index].name);
        sizes.push_back(s.size);
      }
      BOOST_TEST(names == chunks[c]["names"].get<std::vector<std::string>>(), "buffer " << buffer);
      BOOST_TEST(sizes == chunks[c]["tensor_sizes"].get<std::vector<std::uint64_t>>());
      at::Tensor packed = at::empty({static_cast<std::int64_t>(plan[c].size_bytes)},
                                    at::TensorOptions().dtype(at::kByte));
      for (const auto& s : plan[c].slices)
        trainer_sdk::pack_slice(packed, s, tensors[s.param_index]);
      auto expected = from_hex(chunks[c]["bytes_hex"]);
      BOOST_REQUIRE_EQUAL(static_cast<std::size_t>(packed.numel()), expected.size());
      // (An empty chunk has no data pointer to compare: found by UBSan.)
      BOOST_TEST((expected.empty() ||
                  std::memcmp(packed.data_ptr(), expected.data(), expected.size()) == 0),
                 "buffer " << buffer << " chunk " << c);
    }
  }
}

BOOST_AUTO_TEST_CASE(layerwise_groups_match_vllms_base_py) {
  json g = golden("layerwise_groups.json");
  for (const auto& [name, c] : g["cases"].items()) {
    auto groups = protocol::layerwise_groups(c["names"].get<std::vector<std::string>>());
    BOOST_TEST(groups == c["groups"].get<std::vector<std::vector<std::string>>>(), name);
  }
}

BOOST_AUTO_TEST_SUITE_END()
