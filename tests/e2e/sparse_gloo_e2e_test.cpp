// Sparse deltas over gloo into a real worker: exactly the patched elements change.
#include <boost/test/unit_test.hpp>

#include <ATen/ops/tensor.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "model_loader/model_test_support.hpp"
#include "protocol/errors.hpp"
#include "trainer_sdk/sparse_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/tensor_digest.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

at::Tensor ints(std::vector<std::int32_t> v) {
  return at::tensor(v, at::TensorOptions().dtype(at::kInt));
}
at::Tensor floats(std::vector<float> v) {
  return at::tensor(v, at::TensorOptions().dtype(at::kFloat));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sparse_gloo_end_to_end)

BOOST_AUTO_TEST_CASE(a_sparse_round_changes_exactly_the_patched_elements) {
  auto config = testing::tiny_config(model_loader::architectures::kQwen2);
  testing::CheckpointDir ckpt(config, 4100);
  testing::WorkerProcess worker({"--model", ckpt.dir.path.string(), "--weight-transfer-config",
                                 R"({"backend": "sparse_gloo"})", "--timeout", "20"});
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(worker.endpoint(), 30s);
  trainer_sdk::SparseGlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
  info.timeout = 30s;
  HOTSWAP_CHECK_THROW_MSG(trainer_sdk::WeightTransferTrainerFactory::trainer_init(
                              info, client,
                              std::make_shared<trainer_sdk::TensorListSource>(
                                  std::vector<std::pair<std::string, at::Tensor>>{})),
                          protocol::ValueError, "takes no WeightSource");
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client);
  auto* sparse = dynamic_cast<trainer_sdk::SparseTrainerEngine*>(engine.get());
  BOOST_REQUIRE(sparse != nullptr);

  auto before = client->call("weight_checker",
                             {{"action", "checksum"}, {"format", "checkpoint"}})["checksums"];
  auto file = ckpt.open();
  const std::string k = "model.layers.0.self_attn.k_proj.weight";  // rows of the fused qkv_proj
  const std::string b = "model.layers.1.self_attn.v_proj.bias";
  std::vector<trainer_sdk::SparsePatch> patches = {
      {k, ints({1, 7, 25}), floats({10, 20, 30}), {16, 32}},
      {b, ints({0}), floats({-5}), {16}},
  };
  sparse->send_weights(patches, "sparse-1");

  // Expected: the old tensors with exactly those elements set.
  at::Tensor k_expected = file.tensor(k).clone();
  k_expected.view({-1}).index_put_({ints({1, 7, 25}).to(at::kLong)}, floats({10, 20, 30}));
  at::Tensor b_expected = file.tensor(b).clone();
  b_expected.view({-1}).index_put_({ints({0}).to(at::kLong)}, floats({-5}));
  auto after = client->call("weight_checker",
                            {{"action", "checksum"}, {"format", "checkpoint"}})["checksums"];
  for (const auto& [name, digest] : after.items()) {
    if (name == k) {
      BOOST_TEST(digest == transport::sha256_hex(k_expected));
    } else if (name == b) {
      BOOST_TEST(digest == transport::sha256_hex(b_expected));
    } else {
      BOOST_TEST(digest == before[name], name);
    }
  }
  BOOST_TEST(client->call("weight_info")["weight_version"] == "sparse-1");

  // Malformed patches are refused before any RPC; an empty round sends nothing.
  HOTSWAP_CHECK_THROW_MSG(
      sparse->send_weights({{k, ints({1}).to(at::kLong), floats({1}), {16, 32}}}),
      protocol::ValueError, "indices must be a 1-D int32 tensor");
  HOTSWAP_CHECK_THROW_MSG(sparse->send_weights({{k, ints({1, 1}), floats({1, 2}), {16, 32}}}),
                          protocol::ValueError, "indices must be unique");
  HOTSWAP_CHECK_THROW_MSG(sparse->send_weights({{k, ints({512}), floats({1}), {16, 32}}}),
                          protocol::ValueError, "indices must lie in 0..511");
  HOTSWAP_CHECK_THROW_MSG(sparse->send_weights({{k, ints({1}), floats({1}), {}}}),
                          protocol::ValueError, "`full_shape` must be set");
  sparse->send_weights({});
  BOOST_TEST(client->call("health")["weight_update_active"] == false);
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"},
                                             {"format", "checkpoint"}})["checksums"] == after);
  HOTSWAP_CHECK_THROW_MSG(engine->send_weights(), protocol::RuntimeError, "send_weights(patches)");
}

BOOST_AUTO_TEST_SUITE_END()
