// The shm data plane into real worker processes on this host.
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/TensorOperators.h>

#include <csignal>
#include <filesystem>
#include <thread>

#include "e2e/e2e_support.hpp"
#include "model_loader/model_test_support.hpp"
#include "protocol/errors.hpp"
#include "protocol/shm_info.hpp"
#include "test_support.hpp"
#include "trainer_sdk/fan_out_client.hpp"
#include "trainer_sdk/shared_weight_arena.hpp"
#include "trainer_sdk/shm_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "transport/arena_fence.hpp"
#include "transport/shm_ring.hpp"
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
      testing::tiny_config(model_loader::architectures::kLlama, protocol::DType::kBFloat16);
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

// A model a few times the stream window, so that every chunk wraps around it.
BOOST_AUTO_TEST_CASE(rounds_stream_through_the_window_or_travel_in_whole_chunks_alike) {
  auto config =
      testing::tiny_config(model_loader::architectures::kLlama, protocol::DType::kBFloat16);
  config.hidden_size = 256;
  config.intermediate_size = 512;
  config.num_attention_heads = 8;
  config.num_key_value_heads = 4;
  config.head_dim = 32;
  config.vocab_size = 1024;  // 512 KiB embeddings, the largest tensor
  testing::CheckpointDir old_ckpt(config, 6100), new_ckpt(config, 6200);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& [name, tensor] : new_ckpt.tensors())
    tensors.emplace_back(name, tensor);
  auto source = std::make_shared<trainer_sdk::TensorListSource>(tensors);
  auto worker = [&] {
    return std::make_unique<testing::WorkerProcess>(
        std::vector<std::string>{"--model", old_ckpt.dir.path.string(), "--weight-transfer-config",
                                 R"({"backend": "shm"})", "--timeout", "20"});
  };
  auto w0 = worker(), w1 = worker();
  auto client = std::make_shared<trainer_sdk::FanOutClient>(
      std::vector<std::shared_ptr<trainer_sdk::ZmqWeightSyncClient>>{
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w0->endpoint(), 30s),
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w1->endpoint(), 30s)});
  const auto before = client->workers()[0]->call("weight_checker", {{"action", "checksum"}});
  for (bool window : {true, false}) {
    trainer_sdk::ShmTrainerInitInfo info(2, 0);
    info.packed_buffer_size_bytes = 1 << 20;  // a 768 KiB window after the progress table
    info.timeout = 30s;
    info.stream_window = window;
    auto engine = trainer_sdk::ShmTrainerEngine::trainer_init(info, client, source);
    BOOST_TEST(engine->stream_window_bytes() == (window ? 768u << 10 : 0u));
    // Verified: each worker's checksums must equal the trainer's, or push throws.
    for (int round = 1; round <= 2; ++round)
      engine->push({std::string(window ? "window-" : "whole-") + std::to_string(round), true});
  }
  BOOST_TEST(client->workers()[1]->call("weight_info")["weight_version"] == "whole-2");
  BOOST_TEST(client->workers()[0]->call("weight_checker", {{"action", "checksum"}}) != before);
}

BOOST_FIXTURE_TEST_CASE(a_window_the_worker_did_not_join_is_refused_and_loses_nothing, Fixture) {
  auto w = worker();
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  const auto before = client->call("weight_checker", {{"action", "checksum"}});
  // Buffers too small for a window: the worker cannot join one.
  const std::string name = "/hotswap-" + std::to_string(::getpid()) + "-unjoined-0";
  auto ring = transport::ShmRing::create({name}, 8192, 1);
  client->init_weight_transfer_engine(
      {{"segment_names", {name}}, {"packed_buffer_size_bytes", 8192}});
  BOOST_TEST(ring.window_bytes() == 0u);
  nlohmann::json update = protocol::ShmUpdateInfo{source()->metadata(), 1, {}, 0}.to_json();
  update["stream_window_bytes"] = 4096;
  client->start_weight_update();
  HOTSWAP_CHECK_THROW_MSG(client->update_weights(update), protocol::ValueError,
                          "did not join the window of its buffers");
  BOOST_TEST(client->call("health")["weight_update_active"] == false);
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) == before);
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

// Round 1 from `first`; later rounds from `full`, the second tensor held back for a while (a
// slow trainer).
class FirstRoundFailsSource final : public trainer_sdk::WeightSource {
 public:
  FirstRoundFailsSource(std::shared_ptr<trainer_sdk::WeightSource> first,
                        std::shared_ptr<trainer_sdk::TensorListSource> full)
      : first_(std::move(first)), full_(std::move(full)) {}
  std::vector<protocol::ParamMeta> metadata() override { return full_->metadata(); }
  std::unique_ptr<trainer_sdk::WeightStream> iter() override {
    struct Slow final : trainer_sdk::WeightStream {
      std::unique_ptr<trainer_sdk::WeightStream> inner;
      int yielded = 0;
      std::optional<trainer_sdk::NamedWeight> next() override {
        if (yielded++ == 1) std::this_thread::sleep_for(500ms);
        return inner->next();
      }
    };
    if (rounds_++ == 0) return first_->iter();
    auto slow = std::make_unique<Slow>();
    slow->inner = full_->iter();
    return slow;
  }

 private:
  std::shared_ptr<trainer_sdk::WeightSource> first_;
  std::shared_ptr<trainer_sdk::TensorListSource> full_;
  int rounds_ = 0;
};

BOOST_FIXTURE_TEST_CASE(a_round_after_one_that_failed_part_way_takes_fresh_chunks, Fixture) {
  // Regression: the failed round's chunks kept their sequence numbers for the next round, whose
  // worker could take a chunk the failed round had published (or half copied) for its own.
  auto w = worker("2");
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  trainer_sdk::ShmTrainerInitInfo info(1, 0);
  info.packed_buffer_size_bytes = 4096;  // a chunk per tensor or two
  info.timeout = 10s;
  // The failed round: other values than the good one's, and only three of them.
  std::vector<std::pair<std::string, at::Tensor>> shifted;
  for (auto& [name, tensor] : new_ckpt.tensors())
    shifted.emplace_back(name, tensor + 1);
  auto first = std::make_shared<testing::TruncatedSource>(
      std::make_shared<trainer_sdk::TensorListSource>(shifted), 3);
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
      info, client, std::make_shared<FirstRoundFailsSource>(first, source()));
  BOOST_CHECK_THROW(engine->send_weights(), protocol::ValueError);  // the source ran dry
  BOOST_TEST(testing::wait_for_session_end(*client, 20s));
  engine->push({"after", true});
  testing::verify_serves(*client, new_ckpt);
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
  auto ring =
      transport::ShmRing::create({"/hotswap-" + std::to_string(::getpid()) + "-offsets"}, 64, 1);
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
  // At the very end of the arena's data area: its fence, then 4096 bytes.
  update_info["arena_offsets"].back() = 4096 + transport::ArenaFence::kBytes;

  // Offsets without an arena at the handshake. A failed update ends the session.
  client->init_weight_transfer_engine(
      {{"segment_names", ring.names()}, {"packed_buffer_size_bytes", 64}});
  client->start_weight_update();
  HOTSWAP_CHECK_THROW_MSG(client->update_weights(update_info), protocol::Error,
                          "in a shared weight arena, but the handshake named none");
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) == before);

  client->init_weight_transfer_engine({{"segment_names", ring.names()},
                                       {"packed_buffer_size_bytes", 64},
                                       {"arena_name", arena.name()}});
  client->start_weight_update();
  HOTSWAP_CHECK_THROW_MSG(client->update_weights(update_info), protocol::Error,
                          "the shared weight arena " + arena.name() + ", which holds 4160");
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) == before);
  BOOST_TEST(client->call("health")["status"] == "ok");
}

// A worker reads an arena only while the trainer holds it frozen for the round it was asked to
// read (transport/arena_fence.hpp): else the bytes may be the trainer's next ones, or half of
// them. Driven by hand here, as a trainer that moved on would leave it.
BOOST_FIXTURE_TEST_CASE(an_arena_not_frozen_for_the_round_is_refused_and_loses_nothing, Fixture) {
  auto w = worker();
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  const auto before = client->call("weight_checker", {{"action", "checksum"}});
  trainer_sdk::SharedWeightArena arena(1 << 20);
  auto ring =
      transport::ShmRing::create({"/hotswap-" + std::to_string(::getpid()) + "-fence"}, 64, 1);
  nlohmann::json update_info = nlohmann::json::object();
  std::vector<protocol::ParamMeta> meta;
  std::vector<std::int64_t> offsets;
  for (auto& [name, tensor] : new_ckpt.tensors()) {
    arena.copy_in(name, tensor);
    meta.push_back(trainer_sdk::param_meta_of(name, tensor));
    offsets.push_back(arena.find(name)->offset);
  }
  protocol::write_param_lists(meta, update_info);
  update_info["first_sequence"] = 7;
  update_info["arena_offsets"] = offsets;
  client->init_weight_transfer_engine({{"segment_names", ring.names()},
                                       {"packed_buffer_size_bytes", 64},
                                       {"arena_name", arena.name()}});
  auto round = [&] {
    client->start_weight_update();
    client->update_weights(update_info);
    client->finish_weight_update(std::nullopt);
  };
  // Released: the trainer's round ended (a late worker) and it may be training in place.
  HOTSWAP_CHECK_THROW_MSG(round(), protocol::Error,
                          "the shared weight arena " + arena.name() +
                              " is released (the trainer may be writing it), not for this round "
                              "(7): the trainer moved on");
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) == before);
  // Frozen for another round: the trainer began its next one.
  {
    transport::FrozenArenaRound next(arena.fence(), 9);
    HOTSWAP_CHECK_THROW_MSG(round(), protocol::Error,
                            "is frozen for round 9, not for this round (7)");
  }
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) == before);
  BOOST_TEST(client->call("health")["status"] == "ok");
  // Frozen for this one: read in place, the new weights.
  {
    transport::FrozenArenaRound frozen(arena.fence(), 7);
    round();
  }
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) != before);
}

BOOST_FIXTURE_TEST_CASE(a_worker_clears_a_dead_trainers_segments_and_never_a_live_ones, Fixture) {
  auto w = worker();
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  auto exists = [](const std::string& name) { return std::filesystem::exists("/dev/shm" + name); };
  const std::string base = "/hotswap-" + std::to_string(::getpid()) + "-left-";
  // A trainer that died without cleaning up: a child makes a ring and an arena and exits
  // without running a destructor, as a SIGKILLed trainer would.
  pid_t dead = ::fork();
  if (dead == 0) {
    new transport::ShmRing(transport::ShmRing::create({base + "dead-0"}, 4096, 1));
    new transport::ShmSegment(
        transport::ShmSegment::create(base + "dead-arena", transport::ShmKind::kWeightArena, 4096));
    ::_exit(0);
  }
  ::waitpid(dead, nullptr, 0);
  BOOST_REQUIRE(exists(base + "dead-0") && exists(base + "dead-arena"));

  // A live trainer's handshake: the worker sweeps the dead one's segments away on the way.
  auto ring = transport::ShmRing::create({base + "live-0"}, 4096, 1);
  auto arena =
      transport::ShmSegment::create(base + "live-arena", transport::ShmKind::kWeightArena, 4096);
  client->init_weight_transfer_engine({{"segment_names", ring.names()},
                                       {"packed_buffer_size_bytes", 4096},
                                       {"arena_name", arena.name()}});
  BOOST_TEST(!exists(base + "dead-0"));
  BOOST_TEST(!exists(base + "dead-arena"));
  // A live trainer's segments survive the worker's shutdown of the channel and of itself.
  client->call("shutdown_weight_transfer_engine");
  BOOST_TEST(exists(base + "live-0"));
  BOOST_TEST(exists(base + "live-arena"));
  client->call("shutdown");
  BOOST_TEST(w->wait_exit(20s) == 0);
  BOOST_TEST(exists(base + "live-0"));
  BOOST_TEST(exists(base + "live-arena"));
}

BOOST_FIXTURE_TEST_CASE(a_trainer_killed_after_init_leaves_nothing_behind, Fixture) {
  auto w = worker();
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  const std::string base = "/hotswap-" + std::to_string(::getpid()) + "-killed-";
  int ready[2];
  BOOST_REQUIRE(::pipe(ready) == 0);
  pid_t trainer = ::fork();
  if (trainer == 0) {
    new transport::ShmRing(transport::ShmRing::create({base + "0", base + "1"}, 4096, 1));
    char byte = 1;
    [[maybe_unused]] auto n = ::write(ready[1], &byte, 1);
    ::pause();  // until killed
    ::_exit(0);
  }
  char byte = 0;
  BOOST_REQUIRE(::read(ready[0], &byte, 1) == 1);
  client->init_weight_transfer_engine(
      {{"segment_names", {base + "0", base + "1"}}, {"packed_buffer_size_bytes", 4096}});
  ::kill(trainer, SIGKILL);
  ::waitpid(trainer, nullptr, 0);
  // The worker watches the trainer: its segments go without any further call.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::filesystem::exists("/dev/shm" + base + "0") &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  BOOST_TEST(!std::filesystem::exists("/dev/shm" + base + "0"));
  BOOST_TEST(!std::filesystem::exists("/dev/shm" + base + "1"));
  ::close(ready[0]);
  ::close(ready[1]);
}

BOOST_FIXTURE_TEST_CASE(a_trainer_that_shrinks_its_buffers_fails_the_round_not_the_worker,
                        Fixture) {
  auto w = worker();
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  const auto before = client->call("weight_checker", {{"action", "checksum"}});
  const auto greedy = [&] {
    return client->call(
        "generate",
        {{"prompt_token_ids", {1, 2, 3}}, {"max_tokens", 4}, {"temperature", 0}})["token_ids"];
  };
  const auto tokens = greedy();
  for (bool arena_case : {false, true}) {
    const std::string base =
        "/hotswap-" + std::to_string(::getpid()) + "-shrink-" + std::to_string(arena_case) + "-";
    auto ring = transport::ShmRing::create({base + "0"}, 1 << 20, 1);
    trainer_sdk::SharedWeightArena arena(1 << 20);
    nlohmann::json update_info = nlohmann::json::object();
    std::vector<protocol::ParamMeta> meta;
    std::vector<std::int64_t> offsets;
    for (auto& [name, tensor] : new_ckpt.tensors()) {
      auto t = arena.copy_in(name, tensor);
      meta.push_back(trainer_sdk::param_meta_of(name, t));
      offsets.push_back(arena.find(name)->offset);
    }
    protocol::write_param_lists(meta, update_info);
    update_info["first_sequence"] = 1;
    nlohmann::json init = {{"segment_names", ring.names()}, {"packed_buffer_size_bytes", 1 << 20}};
    if (arena_case) {
      update_info["arena_offsets"] = offsets;
      init["arena_name"] = arena.name();
    }
    client->init_weight_transfer_engine(init);
    // The trainer (a buggy one) truncates a segment after the handshake: what would have been
    // SIGBUS in the worker is a failed round.
    const std::string victim = arena_case ? arena.name() : base + "0";
    int fd = ::shm_open(victim.c_str(), O_RDWR, 0);
    BOOST_REQUIRE(fd >= 0);
    BOOST_REQUIRE(::ftruncate(fd, 0) == 0);
    ::close(fd);
    client->start_weight_update();
    try {
      client->update_weights(update_info);
      BOOST_FAIL("a shrunk segment must fail the round");
    } catch (const protocol::Error& e) {
      BOOST_TEST(protocol::error_code(e.kind()) == protocol::kTransferFailedCode);
      BOOST_TEST(std::string(e.what()).find(victim) != std::string::npos, e.what());
    }
    BOOST_TEST(client->call("health")["status"] == "ok");
    BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) == before);
    BOOST_TEST(greedy() == tokens);
  }
}

BOOST_FIXTURE_TEST_CASE(the_worker_opens_only_segments_a_hotswap_trainer_made, Fixture) {
  auto w = worker();
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  // Another program's segment, and one under hotswap's prefix that has no hotswap header.
  const std::string foreign = "/not-hotswap-" + std::to_string(::getpid());
  const std::string headerless = "/hotswap-" + std::to_string(::getpid()) + "-headerless";
  const std::string content(8192, 'x');
  for (const auto& name : {foreign, headerless}) {
    int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    BOOST_REQUIRE(fd >= 0);
    BOOST_REQUIRE(::write(fd, content.data(), content.size()) ==
                  static_cast<ssize_t>(content.size()));
    ::close(fd);
  }
  HOTSWAP_CHECK_THROW_MSG(client->init_weight_transfer_engine({{"segment_names", {foreign}}}),
                          protocol::ValueError, "must be a hotswap shared-memory name");
  HOTSWAP_CHECK_THROW_MSG(client->init_weight_transfer_engine({{"segment_names", {headerless}}}),
                          protocol::ValueError, "has no hotswap header");
  auto ring =
      transport::ShmRing::create({"/hotswap-" + std::to_string(::getpid()) + "-ok-0"}, 64, 1);
  HOTSWAP_CHECK_THROW_MSG(client->init_weight_transfer_engine({{"segment_names", ring.names()},
                                                               {"packed_buffer_size_bytes", 64},
                                                               {"arena_name", headerless}}),
                          protocol::ValueError, "has no hotswap header");
  client->call("shutdown_weight_transfer_engine");
  // Neither was unlinked nor written.
  for (const auto& name : {foreign, headerless}) {
    int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    BOOST_REQUIRE_MESSAGE(fd >= 0, name << " must still exist");
    std::string read_back(content.size(), '\0');
    BOOST_TEST(::read(fd, read_back.data(), read_back.size()) ==
               static_cast<ssize_t>(content.size()));
    BOOST_TEST((read_back == content));
    ::close(fd);
    ::shm_unlink(name.c_str());
  }
}

BOOST_AUTO_TEST_SUITE_END()
