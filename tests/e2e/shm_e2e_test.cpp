// The shm data plane into real worker processes on this host.
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "e2e/e2e_support.hpp"
#include "model_loader/model_test_support.hpp"
#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "trainer_sdk/fan_out_client.hpp"
#include "trainer_sdk/shared_weight_arena.hpp"
#include "trainer_sdk/shm_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;

namespace {

// This process's shared-memory segments still on the host.
std::vector<std::string> leftover_segments() {
  std::vector<std::string> out;
  const std::string mine = "hotswap-" + std::to_string(::getpid()) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    if (e.path().filename().string().starts_with(mine)) out.push_back(e.path().filename());
  }
  return out;
}

struct Fixture {
  model_loader::ModelConfig config =
      testing::tiny_config(model_loader::Architecture::kLlama, protocol::DType::kBFloat16);
  testing::CheckpointDir old_ckpt{config, 5100};
  testing::CheckpointDir new_ckpt{config, 5200};

  std::unique_ptr<testing::WorkerProcess> worker(const std::string& timeout = "20") {
    return std::make_unique<testing::WorkerProcess>(
        std::vector<std::string>{"--model", old_ckpt.dir.path.string(), "--weight-transfer-config",
                                 R"({"backend": "shm"})", "--timeout", timeout});
  }
  std::shared_ptr<trainer_sdk::TensorListSource> source() const {
    std::vector<std::pair<std::string, at::Tensor>> t;
    for (auto& [name, tensor] : new_ckpt.tensors())
      t.emplace_back(name, tensor);
    return std::make_shared<trainer_sdk::TensorListSource>(t);
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(shm_end_to_end)

BOOST_FIXTURE_TEST_CASE(two_workers_read_the_same_double_buffered_chunks, Fixture) {
  auto w0 = worker(), w1 = worker();
  auto client = std::make_shared<trainer_sdk::FanOutClient>(
      std::vector<std::shared_ptr<trainer_sdk::ZmqWeightSyncClient>>{
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w0->endpoint(), 30s),
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w1->endpoint(), 30s)});
  {
    trainer_sdk::ShmTrainerInitInfo info(2, 0);
    info.packed_buffer_size_bytes = 4096;  // many chunks through two buffers
    info.timeout = 30s;
    auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source());
    for (int round = 1; round <= 3; ++round)
      engine->push({"shm-" + std::to_string(round), true});
    BOOST_TEST(client->workers()[1]->call("weight_info")["weight_version"] == "shm-3");
    BOOST_TEST(leftover_segments().size() == 2u);
  }
  BOOST_TEST(leftover_segments().empty());  // the trainer's buffers go with it
}

BOOST_FIXTURE_TEST_CASE(a_tensor_larger_than_the_buffer_is_refused_before_any_rpc, Fixture) {
  auto w = worker();
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  trainer_sdk::ShmTrainerInitInfo info(1, 0);
  info.packed_buffer_size_bytes = 1000;  // the 64×32 bf16 embeddings need 4096
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source());
  BOOST_CHECK_EXCEPTION(engine->send_weights(), protocol::ValueError, [](const auto& e) {
    return std::string(e.what()).find("exceeds buffer_size_bytes=1000") != std::string::npos;
  });
  BOOST_TEST(client->call("health")["weight_update_active"] == false);
}

BOOST_FIXTURE_TEST_CASE(a_trainer_that_stops_mid_round_leaves_old_weights_and_no_segments,
                        Fixture) {
  auto w = worker("2");
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  auto before = client->call("weight_checker", {{"action", "checksum"}});
  {
    trainer_sdk::ShmTrainerInitInfo info(1, 0);
    info.packed_buffer_size_bytes = 8192;
    info.timeout = 10s;
    auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
        info, client, std::make_shared<testing::TruncatedSource>(source(), 3));
    BOOST_CHECK_THROW(engine->send_weights(), protocol::ValueError);  // the source ran dry
  }
  BOOST_TEST(leftover_segments().empty());
  // The worker's wait ends within its --timeout (2 s); the session ends; old weights serve.
  BOOST_TEST(testing::wait_for_session_end(*client, 20s));
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) == before);
  // A new handshake works.
  trainer_sdk::ShmTrainerInitInfo info(1, 0);
  info.packed_buffer_size_bytes = 8192;
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source());
  engine->push({"after", true});
}

BOOST_FIXTURE_TEST_CASE(arena_tensors_are_read_in_place_next_to_buffered_ones, Fixture) {
  auto w0 = worker(), w1 = worker();
  auto client = std::make_shared<trainer_sdk::FanOutClient>(
      std::vector<std::shared_ptr<trainer_sdk::ZmqWeightSyncClient>>{
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w0->endpoint(), 30s),
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w1->endpoint(), 30s)});
  // Every other tensor lives in the arena (trained in place); the rest are ordinary tensors.
  auto arena = std::make_shared<trainer_sdk::SharedWeightArena>(1 << 20);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& [name, tensor] : new_ckpt.tensors()) {
    const bool in_arena = tensors.size() % 2 == 0;
    tensors.emplace_back(name, in_arena ? arena->copy_in(name, tensor) : tensor.clone());
  }
  auto source = std::make_shared<trainer_sdk::TensorListSource>(tensors);
  trainer_sdk::ShmTrainerInitInfo info(2, 0);
  info.packed_buffer_size_bytes = 4096;
  info.timeout = 30s;
  info.arena = arena;
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
  engine->push({"arena-1", true});  // verified: both workers hold exactly the source's bytes
  for (auto& [name, tensor] : tensors)
    tensor.mul_(0.5);  // a training step, in place, arena tensors included
  engine->push({"arena-2", true});
  BOOST_TEST(client->workers()[1]->call("weight_info")["weight_version"] == "arena-2");
}

BOOST_FIXTURE_TEST_CASE(a_source_tensor_outside_its_arena_is_refused, Fixture) {
  auto w = worker("2");
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  auto before = client->call("weight_checker", {{"action", "checksum"}});
  auto arena = std::make_shared<trainer_sdk::SharedWeightArena>(1 << 20);
  for (auto& [name, tensor] : new_ckpt.tensors())
    arena->copy_in(name, tensor);
  trainer_sdk::ShmTrainerInitInfo info(1, 0);
  info.packed_buffer_size_bytes = 8192;
  info.timeout = 10s;
  info.arena = arena;
  // The source yields copies, not the arena's tensors: the workers would read stale bytes.
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source());
  HOTSWAP_CHECK_THROW_MSG(engine->send_weights(), protocol::ValueError,
                          "from outside the shared weight arena it was allocated in");
  // Nothing was committed (the round never finished) and a trainer with the right source
  // starts over: its handshake ends the stale session.
  BOOST_TEST(client->call("health")["status"] == "ok");
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& [name, tensor] : new_ckpt.tensors())
    tensors.emplace_back(name, arena->find(name)->tensor);
  engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
      info, client, std::make_shared<trainer_sdk::TensorListSource>(tensors));
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) == before);
  engine->push({"fixed", true});
}

BOOST_FIXTURE_TEST_CASE(an_arena_tensor_unlike_the_metadata_is_refused_before_any_rpc, Fixture) {
  auto w = worker();
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  auto arena = std::make_shared<trainer_sdk::SharedWeightArena>(1 << 20);
  const auto tensors = new_ckpt.tensors();
  // The arena holds the first tensor as float32; the source declares it bfloat16.
  arena->copy_in(tensors[0].first, tensors[0].second.to(at::kFloat));
  trainer_sdk::ShmTrainerInitInfo info(1, 0);
  info.packed_buffer_size_bytes = 8192;
  info.arena = arena;
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source());
  HOTSWAP_CHECK_THROW_MSG(engine->send_weights(), protocol::ValueError,
                          "'" + tensors[0].first + "' is float32");
  BOOST_TEST(client->call("health")["weight_update_active"] == false);
}

BOOST_FIXTURE_TEST_CASE(the_worker_checks_arena_offsets_before_copying_anything, Fixture) {
  auto w = worker();
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  auto before = client->call("weight_checker", {{"action", "checksum"}});
  trainer_sdk::SharedWeightArena arena(4096);
  transport::ShmSegment buffer = transport::ShmSegment::create(
      "/hotswap-" + std::to_string(::getpid()) + "-offsets", transport::ShmRing::kHeaderBytes + 64);
  nlohmann::json update_info = nlohmann::json::object();
  std::vector<protocol::ParamMeta> meta;
  std::vector<std::int64_t> offsets;
  for (auto& [name, tensor] : new_ckpt.tensors()) {
    meta.push_back(trainer_sdk::param_meta_of(name, tensor));
    offsets.push_back(0);
  }
  protocol::write_param_lists(meta, update_info);
  update_info["first_sequence"] = 1;
  update_info["arena_offsets"] = offsets;
  update_info["arena_offsets"].back() = 4096;  // at the very end of the 4096-byte arena

  // Offsets without an arena at the handshake. A failed update ends the session.
  client->init_weight_transfer_engine(
      {{"segment_names", {buffer.name()}}, {"packed_buffer_size_bytes", 64}});
  client->start_weight_update();
  HOTSWAP_CHECK_THROW_MSG(client->update_weights(update_info), protocol::Error,
                          "in a shared weight arena, but the handshake named none");
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) == before);

  client->init_weight_transfer_engine({{"segment_names", {buffer.name()}},
                                       {"packed_buffer_size_bytes", 64},
                                       {"arena_name", arena.name()}});
  client->start_weight_update();
  HOTSWAP_CHECK_THROW_MSG(client->update_weights(update_info), protocol::Error,
                          "of the shared weight arena " + arena.name() + ", which holds 4096");
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) == before);
  BOOST_TEST(client->call("health")["status"] == "ok");
}

BOOST_FIXTURE_TEST_CASE(a_worker_clears_a_dead_trainers_segments_and_never_a_live_ones, Fixture) {
  auto w = worker();
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  // A trainer that is gone: its pid, its segments still in /dev/shm.
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  auto names_of = [](pid_t pid) {
    const std::string base = "/hotswap-" + std::to_string(pid) + "-left-";
    return std::pair{base + "0", base + "arena"};
  };
  auto exists = [](const std::string& name) { return std::filesystem::exists("/dev/shm" + name); };
  for (pid_t creator : {dead, ::getpid()}) {
    auto [ring_name, arena_name] = names_of(creator);
    auto ring = transport::ShmRing::create({ring_name}, 4096, 1);
    auto arena = transport::ShmSegment::create(arena_name, 4096);
    client->init_weight_transfer_engine({{"segment_names", {ring_name}},
                                         {"packed_buffer_size_bytes", 4096},
                                         {"arena_name", arena_name}});
    client->call("shutdown_weight_transfer_engine");
    const bool alive = creator == ::getpid();
    BOOST_TEST(exists(ring_name) == alive,
               "ring of " << (alive ? "a live" : "a dead") << " trainer");
    BOOST_TEST(exists(arena_name) == alive,
               "arena of " << (alive ? "a live" : "a dead") << " trainer");
  }
}

BOOST_AUTO_TEST_SUITE_END()
