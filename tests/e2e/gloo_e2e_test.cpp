// A trainer built on trainer_sdk pushes weights into real hotswap-worker processes over the
// gloo data plane, and every round is verified bit for bit.
#include <boost/test/unit_test.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <future>

#include "e2e/e2e_support.hpp"
#include "model_loader/generation.hpp"
#include "model_loader/model_test_support.hpp"
#include "protocol/errors.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/fan_out_client.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/tensor_digest.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;
using testing::CheckpointDir;
using testing::WorkerProcess;

namespace {

struct Fixture {
  explicit Fixture(model_loader::ModelConfig c = testing::tiny_config(
                       model_loader::architectures::kQwen3, protocol::DType::kBFloat16))
      : config(std::move(c)), old_ckpt{config, 3100}, new_ckpt{config, 3200} {}
  model_loader::ModelConfig config;
  CheckpointDir old_ckpt;
  CheckpointDir new_ckpt;

  std::unique_ptr<WorkerProcess> worker(int dp_rank, int dp_size,
                                        const std::string& timeout = "20") {
    return std::make_unique<WorkerProcess>(std::vector<std::string>{
        "--model", old_ckpt.dir.path.string(), "--weight-transfer-config", R"({"backend": "gloo"})",
        "--data-parallel-rank", std::to_string(dp_rank), "--data-parallel-size",
        std::to_string(dp_size), "--timeout", timeout});
  }
  std::shared_ptr<trainer_sdk::TensorListSource> source(bool old = false) const {
    std::vector<std::pair<std::string, at::Tensor>> t;
    for (auto& [name, tensor] : (old ? old_ckpt : new_ckpt).tensors())
      t.emplace_back(name, tensor);
    return std::make_shared<trainer_sdk::TensorListSource>(t);
  }
  // The worker's checkpoint-format digests against the source's own.
  void verify(trainer_sdk::ZmqWeightSyncClient& client) const {
    testing::verify_serves(client, new_ckpt);
  }
};

// A mixture of experts: per-expert checkpoint tensors on the wire, fused experts in the worker.
struct MoeFixture : Fixture {
  MoeFixture()
      : Fixture(testing::tiny_config(model_loader::architectures::kQwen3Moe,
                                     protocol::DType::kBFloat16)) {}
};

}  // namespace

BOOST_AUTO_TEST_SUITE(gloo_end_to_end)

BOOST_FIXTURE_TEST_CASE(a_mixture_of_experts_takes_packed_and_unpacked_rounds, MoeFixture) {
  auto w = worker(0, 1);
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  const json greedy = {{"prompt_token_ids", {3, 17, 42, 5}}, {"max_tokens", 6}, {"temperature", 0}};
  BOOST_TEST(client->call("generate", greedy)["token_ids"].size() == 6u);
  for (bool packed : {true, false}) {
    trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
    info.packed = packed;
    info.packed_buffer_size_bytes = 3000;  // chunks that split a layer's experts
    info.timeout = 30s;
    auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source());
    engine->push({packed ? "moe-packed" : "moe-unpacked", /*verify=*/true});
    verify(*client);
    engine->shutdown();
  }
  // The worker now generates what a fresh load of the new checkpoint generates.
  auto fresh = new_ckpt.load();
  model_loader::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 6;
  auto expected = model_loader::generate(*fresh, {{3, 17, 42, 5}}, params).at(0).token_ids;
  const json after = client->call("generate", greedy);
  BOOST_TEST(after["token_ids"].get<std::vector<std::int64_t>>() == expected);
  BOOST_TEST(after["weight_versions"][0][0] == "moe-unpacked");
}

BOOST_FIXTURE_TEST_CASE(one_worker_packed_and_unpacked_rounds_verify, Fixture) {
  auto w = worker(0, 1);
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  for (bool packed : {true, false}) {
    trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
    info.packed = packed;
    info.packed_buffer_size_bytes = 3000;  // many chunks
    info.timeout = 30s;
    std::unique_ptr<trainer_sdk::TrainerWeightTransferEngine> engine;
    auto src = source();
    engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, src);
    engine->push({packed ? "packed-1" : "unpacked-1", /*verify=*/true});
    verify(*client);
    BOOST_TEST(client->call("weight_info")["weight_version"] ==
               (packed ? "packed-1" : "unpacked-1"));
    engine->shutdown();
  }
}

// Packed rounds land in a slab of the worker's staged weights: the first in a new one, the
// second in the allocation the model was loaded into, then the two alternate. Rounds that
// change every weight back and forth show that no round serves another's bytes.
BOOST_FIXTURE_TEST_CASE(packed_rounds_into_alternating_slabs_verify, Fixture) {
  auto w = worker(0, 1);
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  for (int round = 0; round < 4; ++round) {
    const bool old = round % 2 == 1;
    trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
    info.packed_buffer_size_bytes = 16 << 10;  // a few chunks, within the scratch the slab allows
    info.timeout = 30s;
    auto engine =
        trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source(old));
    const std::string version = "round-" + std::to_string(round);
    engine->push({version, /*verify=*/true});
    testing::verify_serves(*client, old ? old_ckpt : new_ckpt);
    BOOST_TEST(client->call("weight_info")["weight_version"] == version);
    engine->shutdown();
  }
}

BOOST_FIXTURE_TEST_CASE(two_workers_receive_the_same_broadcast, Fixture) {
  auto w0 = worker(0, 2);
  auto w1 = worker(1, 2);
  auto c0 = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w0->endpoint(), 30s);
  auto c1 = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w1->endpoint(), 30s);
  auto both = std::make_shared<trainer_sdk::FanOutClient>(
      std::vector<std::shared_ptr<trainer_sdk::ZmqWeightSyncClient>>{c0, c1});
  trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 3, 0);
  info.packed_buffer_size_bytes = 4096;
  info.timeout = 30s;
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, both, source());
  engine->push({"both-1", /*verify=*/true});
  verify(*c0);
  verify(*c1);
  BOOST_TEST(c1->call("weight_info")["weight_version"] == "both-1");
  // A failure on one worker is raised naming it, with its own kind.
  c1->call("start_weight_update");
  try {
    both->start_weight_update();
    BOOST_FAIL("expected a RuntimeError");
  } catch (const protocol::RuntimeError& e) {
    BOOST_TEST(std::string(e.what()).find("worker " + w1->endpoint() +
                                          ": start_weight_update called "
                                          "while a weight update is already active") == 0u);
  }
}

BOOST_FIXTURE_TEST_CASE(a_dead_worker_makes_the_trainer_raise_within_its_timeout, Fixture) {
  auto w = worker(0, 1);
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 5s);
  trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
  info.packed = false;
  info.timeout = 5s;
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source());
  ::kill(w->pid(), SIGKILL);
  auto start = std::chrono::steady_clock::now();
  BOOST_CHECK_THROW(engine->send_weights(), protocol::Error);
  BOOST_TEST((std::chrono::steady_clock::now() - start < 15s));
}

BOOST_FIXTURE_TEST_CASE(a_failed_transfer_keeps_old_weights_and_a_new_init_works, Fixture) {
  auto w = worker(0, 1, "3");
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 10s);
  auto before = client->call("weight_checker", {{"action", "checksum"}});
  {
    // The trainer dies mid-transfer: its half of the group goes away after one broadcast.
    trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
    info.packed = false;
    info.timeout = 10s;
    auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
        info, client, std::make_shared<testing::TruncatedSource>(source(), 1));
    BOOST_CHECK_THROW(engine->send_weights(), protocol::ValueError);  // "yielded 1 parameters"
  }
  // The worker's update fails within its --timeout (3 s); the session ends; old weights serve.
  BOOST_TEST(testing::wait_for_session_end(*client, 20s));
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) == before);
  BOOST_TEST(
      client->call("generate", {{"prompt_token_ids", {1, 2}}, {"max_tokens", 2}})["token_ids"]
          .size() == 2u);
  // A new handshake and round work.
  trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
  info.timeout = 20s;
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source());
  engine->send_weights();
  verify(*client);
}

BOOST_FIXTURE_TEST_CASE(a_trainer_gone_during_init_fails_the_handshake_within_the_timeout,
                        Fixture) {
  // The trainer died before hosting its store: nobody listens at master_address:master_port.
  auto w = worker(0, 1, "2");
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  auto start = std::chrono::steady_clock::now();
  BOOST_CHECK_THROW(
      client->init_weight_transfer_engine({{"master_address", "127.0.0.1"},
                                           {"master_port", transport::pick_free_port()},
                                           {"rank_offset", 1},
                                           {"world_size", 2}}),
      protocol::Error);
  BOOST_TEST((std::chrono::steady_clock::now() - start < 20s));
  BOOST_TEST(client->call("health")["status"] == "ok");
  // A live trainer's handshake then works.
  trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
  info.timeout = 20s;
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source());
  engine->push({"after-init-failure", true});
}

BOOST_AUTO_TEST_SUITE_END()
