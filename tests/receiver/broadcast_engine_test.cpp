// The nccl protocol's sequencing over a real gloo group on loopback: a trainer engine and a
// worker engine in two threads of this process, every dtype, packed at chunk boundaries with
// slices misaligned for their dtype, and unpacked.
#include "receiver/broadcast_engine.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <algorithm>
#include <atomic>
#include <future>
#include <thread>

#include "receiver/recording_model.hpp"
#include "receiver/weight_transfer_engine_factory.hpp"
#include "test_support.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "transport/gloo_communicator.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// A client that drives an in-process engine the way a worker would.
class InProcessClient final : public trainer_sdk::WeightSyncClient {
 public:
  explicit InProcessClient(receiver::WeightTransferEngine& engine) : engine_(engine) {}
  void init_weight_transfer_engine(const json& init_info) override {
    engine_.init_transfer_engine(init_info);
  }
  void start_weight_update() override { engine_.start_weight_update(); }
  void update_weights(const json& update_info) override {
    ++in_flight;
    try {
      engine_.update_weights(update_info);
    } catch (...) {
      --in_flight;
      throw;
    }
    --in_flight;
  }
  // Waits for an update call the trainer walked away from (it runs on a detached thread that
  // uses the engine, which must outlive it).
  bool settle(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (in_flight > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return in_flight == 0;
  }
  std::atomic<int> in_flight{0};
  void finish_weight_update(const std::optional<std::string>&) override {
    engine_.finish_weight_update();
  }

 private:
  receiver::WeightTransferEngine& engine_;
};

// Tensors of every wire dtype, with odd sizes so packed slices land
// misaligned (a 3-element bfloat16 followed by a float32, a 1-byte bool before an int64, ...).
std::vector<std::pair<std::string, at::Tensor>> mixed_tensors() {
  auto make = [](std::int64_t n, at::ScalarType t) {
    return (at::arange(n, at::TensorOptions().dtype(at::kFloat)) * 0.37 - 1).to(t);
  };
  return {
      {"a.bf16", make(3, at::kBFloat16)}, {"b.f32", make(5, at::kFloat)},
      {"c.bool", make(1, at::kBool)},     {"d.i64", make(7, at::kLong)},
      {"e.f16", make(9, at::kHalf)},      {"f.u8", make(3, at::kByte)},
      {"g.f64", make(2, at::kDouble)},    {"h.i8", make(5, at::kChar)},
      {"i.i16", make(3, at::kShort)},     {"j.i32", make(4, at::kInt)},
      {"k.empty", make(0, at::kFloat)},   {"l.big", make(600, at::kBFloat16).reshape({20, 30})}};
}

// A gloo receive engine fed by a trainer engine in this process, over a real loopback group:
// the trainer sends mixed_tensors().
struct InProcessPair {
  explicit InProcessPair(bool packed = true,
                         std::int64_t buffer_size = protocol::kDefaultPackedBufferSizeBytes) {
    trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
    info.packed = packed;
    info.packed_buffer_size_bytes = buffer_size;
    info.timeout = 20s;
    trainer = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
        info, client, std::make_shared<trainer_sdk::TensorListSource>(tensors));
  }
  ~InProcessPair() {
    trainer->shutdown();
    engine->shutdown();
  }

  std::shared_ptr<testing::RecordingModel> model = std::make_shared<testing::RecordingModel>();
  std::unique_ptr<receiver::WeightTransferEngine> engine =
      receiver::WeightTransferEngineFactory::create_engine(
          receiver::EngineContext{{"gloo"}, {}, c10::Device(c10::kCPU), model, 20s});
  std::shared_ptr<InProcessClient> client = std::make_shared<InProcessClient>(*engine);
  std::vector<std::pair<std::string, at::Tensor>> tensors = mixed_tensors();
  std::unique_ptr<trainer_sdk::TrainerWeightTransferEngine> trainer;
};

void round_trip(bool packed, std::int64_t buffer_size, bool offer_slab = false) {
  InProcessPair pair(packed, buffer_size);
  pair.model->offer_slab = offer_slab;
  for (int round = 0; round < 2; ++round) {  // buffers are reused across rounds
    pair.model->loaded.clear();
    pair.model->events.clear();
    pair.trainer->send_weights();
    const bool slab = std::ranges::count(pair.model->events, std::string("slab")) == 1;
    BOOST_TEST(slab == (packed && offer_slab));
    BOOST_REQUIRE_EQUAL(pair.model->loaded.size(), pair.tensors.size());
    for (std::size_t i = 0; i < pair.tensors.size(); ++i) {
      BOOST_TEST(pair.model->loaded[i].first == pair.tensors[i].first);
      BOOST_TEST(at::equal(pair.model->loaded[i].second, pair.tensors[i].second),
                 pair.tensors[i].first);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gloo_broadcast)

BOOST_AUTO_TEST_CASE(unpacked_one_broadcast_per_tensor) {
  round_trip(false, 1 << 30);
}

BOOST_AUTO_TEST_CASE(packed_across_many_chunk_boundaries_with_misaligned_slices) {
  for (std::int64_t buffer : {1, 7, 16, 64, 1000, 1 << 20})
    round_trip(true, buffer);
}

// A model that offers one slab for the whole round gets each chunk received straight into its
// part of it, whatever the chunk boundaries: no receive buffers.
BOOST_AUTO_TEST_CASE(packed_chunks_land_in_the_models_slab) {
  for (std::int64_t buffer : {1, 7, 64, 1 << 20})
    round_trip(true, buffer, /*offer_slab=*/true);
}

// vLLM 0.33's trainer: when a round's metadata is the previous round's, it sends empty lists.
class MetadataElidingClient final : public trainer_sdk::WeightSyncClient {
 public:
  explicit MetadataElidingClient(std::shared_ptr<InProcessClient> inner) : inner_(inner) {}
  void init_weight_transfer_engine(const json& init_info) override {
    inner_->init_weight_transfer_engine(init_info);
  }
  void start_weight_update() override { inner_->start_weight_update(); }
  void update_weights(const json& update_info) override {
    const bool same = update_info == last_;
    last_ = update_info;
    inner_->update_weights(same ? json{{"names", json::array()},
                                       {"dtype_names", json::array()},
                                       {"shapes", json::array()}}
                                : update_info);
  }
  void finish_weight_update(const std::optional<std::string>& v) override {
    inner_->finish_weight_update(v);
  }

 private:
  std::shared_ptr<InProcessClient> inner_;
  json last_;
};

BOOST_AUTO_TEST_CASE(empty_lists_reuse_the_previous_rounds_metadata_as_vllm_0_33_does) {
  auto model = std::make_shared<testing::RecordingModel>();
  auto engine = receiver::WeightTransferEngineFactory::create_engine(
      receiver::EngineContext{{"gloo"}, {}, c10::Device(c10::kCPU), model, 20s});
  auto client = std::make_shared<MetadataElidingClient>(std::make_shared<InProcessClient>(*engine));
  auto tensors = mixed_tensors();
  trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
  info.packed_buffer_size_bytes = 64;
  info.timeout = 20s;
  auto trainer = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
      info, client, std::make_shared<trainer_sdk::TensorListSource>(tensors));
  for (int round = 0; round < 3; ++round) {  // rounds 2 and 3 carry no metadata
    model->loaded.clear();
    trainer->send_weights();
    BOOST_REQUIRE_EQUAL(model->loaded.size(), tensors.size());
    BOOST_TEST(at::equal(model->loaded.back().second, tensors.back().second));
  }
  trainer->shutdown();
  engine->shutdown();
}

BOOST_AUTO_TEST_CASE(iteration_that_disagrees_with_metadata_is_refused_by_name) {
  auto model = std::make_shared<testing::RecordingModel>();
  auto engine = receiver::WeightTransferEngineFactory::create_engine(
      receiver::EngineContext{{"gloo"}, {}, c10::Device(c10::kCPU), model, 3s});
  auto client = std::make_shared<InProcessClient>(*engine);

  class Liar final : public trainer_sdk::WeightSource {
   public:
    std::vector<protocol::ParamMeta> metadata() override {
      return {{"w", protocol::DType::kFloat32, {4}}, {"v", protocol::DType::kFloat32, {2}}};
    }
    std::unique_ptr<trainer_sdk::WeightStream> iter() override {
      return trainer_sdk::TensorListSource(
                 {{"w", at::arange(4).to(at::kFloat)}, {"v", at::arange(3).to(at::kFloat)}})
          .iter();
    }
  };
  trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
  info.packed = false;
  info.timeout = 3s;
  auto trainer = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client,
                                                                         std::make_shared<Liar>());
  HOTSWAP_CHECK_THROW_MSG(trainer->send_weights(), protocol::ValueError,
                          "WeightSource metadata disagrees with iteration at index 1: declared "
                          "'v' float32 [2], got 'v' Float [3]");
  // The worker's receive gives up within its own timeout; then the engine is torn down.
  BOOST_TEST(client->settle(10s));
  engine->shutdown();
}

BOOST_AUTO_TEST_CASE(a_non_sender_rank_iterates_its_source_and_never_touches_the_client) {
  // Rank 1 of a two-rank trainer (the sender is rank 0): it joins the trainer-side collectives
  // by iterating, but opens no endpoint and makes no call.
  class NoCalls final : public trainer_sdk::WeightSyncClient {
   public:
    void init_weight_transfer_engine(const json&) override { ++calls; }
    void start_weight_update() override { ++calls; }
    void update_weights(const json&) override { ++calls; }
    void finish_weight_update(const std::optional<std::string>&) override { ++calls; }
    int calls = 0;
  };
  class Counting final : public trainer_sdk::WeightSource {
   public:
    std::vector<protocol::ParamMeta> metadata() override { return inner.metadata(); }
    std::unique_ptr<trainer_sdk::WeightStream> iter() override {
      ++passes;
      return inner.iter();
    }
    trainer_sdk::TensorListSource inner{mixed_tensors()};
    int passes = 0;
  };
  auto client = std::make_shared<NoCalls>();
  auto source = std::make_shared<Counting>();
  trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, /*rank=*/1);
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
  BOOST_TEST(!engine->is_sender());
  engine->send_weights();
  engine->send_weights();
  BOOST_TEST(client->calls == 0);
  BOOST_TEST(source->passes == 2);
}

BOOST_AUTO_TEST_CASE(a_src_outside_the_broadcasters_is_refused_before_any_collective) {
  InProcessPair pair;
  // One broadcaster (rank_offset 1): group rank 1 is this worker, which never sends.
  json update = {{"names", {"w"}}, {"dtype_names", {"float32"}}, {"shapes", {{4}}}, {"src", 1}};
  HOTSWAP_CHECK_THROW_MSG(pair.engine->update_weights(update), protocol::ValueError,
                          "NCCL update src must be a sender rank in [0, 1), got 1.");
  // Nothing moved, so the group is still in step: the next round works.
  pair.trainer->send_weights();
  BOOST_TEST(pair.model->loaded.size() == pair.tensors.size());
}

BOOST_AUTO_TEST_CASE(receive_before_init_is_vllms_runtime_error) {
  auto engine = receiver::WeightTransferEngineFactory::create_engine(receiver::EngineContext{
      {"gloo"}, {}, c10::Device(c10::kCPU), std::make_shared<testing::RecordingModel>(), 3s});
  HOTSWAP_CHECK_THROW_MSG(
      engine->update_weights({{"names", {"w"}}, {"dtype_names", {"float32"}}, {"shapes", {{1}}}}),
      protocol::RuntimeError,
      "Gloo weight transfer not initialized. Call init_transfer_engine() first.");
  HOTSWAP_CHECK_THROW_MSG(
      engine->init_transfer_engine({{"nccl_unique_id_b64", std::string(171, 'A') + "="},
                                    {"rank_offset", 1},
                                    {"world_size", 2}}),
      protocol::ValueError, "nccl_unique_id_b64 is for NCCL");
}

BOOST_AUTO_TEST_SUITE_END()
