#include "receiver/weight_transfer_engine.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/ops/full.h>

#include "protocol/nccl_info.hpp"
#include "receiver/recording_model.hpp"
#include "test_support.hpp"
#include "transport/torch_dtype.hpp"

using namespace hotswap;
using nlohmann::json;

namespace {

// A backend whose "data plane" fills each announced tensor with its index: enough to pin what
// the base class guarantees around receive_weights.
class CountingEngine final
    : public receiver::TypedWeightTransferEngine<protocol::NcclInitInfo, protocol::NcclUpdateInfo> {
 public:
  using TypedWeightTransferEngine::TypedWeightTransferEngine;
  std::string_view name() const override { return "CountingWeightTransferEngine"; }
  void start_weight_update() override { model().start_reload(); }
  void finish_weight_update() override { model().finish_reload(); }
  void shutdown() override { shut_down = true; }

  std::optional<protocol::NcclInitInfo> init;
  int receives = 0;
  bool shut_down = false;

 protected:
  void init_transfer_channel(const protocol::NcclInitInfo& info) override { init = info; }
  void receive_weights(const protocol::NcclUpdateInfo& info) override {
    ++receives;
    std::vector<model_loader::NamedTensor> weights;
    for (std::size_t i = 0; i < info.params.size(); ++i) {
      const auto& p = info.params[i];
      weights.emplace_back(p.name,
                           at::full(p.shape, static_cast<double>(i),
                                    at::TensorOptions().dtype(transport::to_scalar_type(p.dtype))));
    }
    model().load_weights(weights);
  }
};

struct Fixture {
  std::shared_ptr<testing::RecordingModel> model = std::make_shared<testing::RecordingModel>();
  CountingEngine engine{receiver::EngineContext{{"counting"}, {}, c10::Device(c10::kCPU), model}};
};

json tcp_init() {
  return {{"master_address", "127.0.0.1"},
          {"master_port", 29500},
          {"rank_offset", 1},
          {"world_size", 2},
          {"packed", true}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(weight_transfer_engine)

BOOST_FIXTURE_TEST_CASE(init_records_the_wire_params_of_the_handshake, Fixture) {
  engine.init_transfer_engine(tcp_init());
  BOOST_REQUIRE(engine.init.has_value());
  BOOST_TEST(engine.init->packing.packed);
  BOOST_TEST(engine.init->world_size == 2);
}

BOOST_FIXTURE_TEST_CASE(invalid_init_info_is_wrapped_with_the_engine_name, Fixture) {
  json bad = tcp_init();
  bad["bogus"] = 1;
  HOTSWAP_CHECK_THROW_MSG(engine.init_transfer_engine(bad), protocol::ValueError,
                          "Invalid init_info for CountingWeightTransferEngine: "
                          "NCCLWeightTransferInitInfo.__init__() got an unexpected keyword "
                          "argument 'bogus'");
  BOOST_TEST(!engine.init.has_value());
}

BOOST_FIXTURE_TEST_CASE(update_weights_parses_receives_and_loads, Fixture) {
  engine.start_weight_update();
  engine.update_weights(
      {{"names", {"a", "b"}}, {"dtype_names", {"bfloat16", "int32"}}, {"shapes", {{2}, {1, 3}}}});
  engine.finish_weight_update();
  BOOST_TEST(engine.receives == 1);
  BOOST_REQUIRE_EQUAL(model->loaded.size(), 2u);
  BOOST_TEST(model->loaded[1].first == "b");
  BOOST_TEST((model->loaded[1].second.scalar_type() == c10::ScalarType::Int));
  BOOST_TEST(model->loaded[1].second.sizes().vec() == (std::vector<std::int64_t>{1, 3}));
  BOOST_TEST(model->events ==
             (std::vector<std::string>{"start_reload", "load a", "load b", "finish_reload"}));
}

BOOST_FIXTURE_TEST_CASE(a_bad_update_info_never_reaches_the_data_plane, Fixture) {
  HOTSWAP_CHECK_THROW_MSG(
      engine.update_weights(
          {{"names", {"a", "b"}}, {"dtype_names", {"float32"}}, {"shapes", {{1}, {1}}}}),
      protocol::ValueError,
      "Invalid update_info for CountingWeightTransferEngine: NCCLWeightTransferUpdateInfo: "
      "`dtype_names` should be of the same size as `names`: got 1 and 2");
  HOTSWAP_CHECK_THROW_MSG(
      engine.update_weights(
          {{"names", {"a"}}, {"dtype_names", {"float32"}}, {"shapes", {{1}}}, {"extra", 1}}),
      protocol::ValueError, "unexpected keyword argument 'extra'");
  BOOST_TEST(engine.receives == 0);
  BOOST_TEST(model->loaded.empty());
}

BOOST_FIXTURE_TEST_CASE(the_update_target_can_be_retargeted_and_reset, Fixture) {
  auto draft = std::make_shared<testing::RecordingModel>();
  BOOST_TEST(engine.supports_draft_weight_update());
  engine.set_weight_update_target(draft);
  engine.update_weights({{"names", {"mtp.w"}}, {"dtype_names", {"float32"}}, {"shapes", {{1}}}});
  BOOST_TEST(draft->loaded.size() == 1u);
  BOOST_TEST(model->loaded.empty());
  engine.reset_weight_update_target();
  engine.update_weights({{"names", {"w"}}, {"dtype_names", {"float32"}}, {"shapes", {{1}}}});
  BOOST_TEST(model->loaded.size() == 1u);
  BOOST_CHECK_THROW(engine.set_weight_update_target(nullptr), protocol::RuntimeError);
}

BOOST_FIXTURE_TEST_CASE(synchronous_engines_have_nothing_to_drain, Fixture) {
  BOOST_TEST(!engine.defers_processing());
  BOOST_CHECK_NO_THROW(engine.drain_pending());
  BOOST_CHECK_NO_THROW(engine.drain_pending());  // idempotent
  engine.shutdown();
  BOOST_TEST(engine.shut_down);
}

BOOST_AUTO_TEST_CASE(an_engine_without_a_model_says_so) {
  CountingEngine engine{receiver::EngineContext{{"counting"}, {}, c10::Device(c10::kCPU), nullptr}};
  HOTSWAP_CHECK_THROW_MSG(engine.start_weight_update(), protocol::RuntimeError,
                          "CountingWeightTransferEngine has no model to load weights into");
}

BOOST_AUTO_TEST_CASE(parallel_config_keeps_vllms_rank_math) {
  receiver::ParallelConfig parallel;
  parallel.data_parallel_rank = 2;
  parallel.data_parallel_size = 4;
  BOOST_TEST(parallel.world_size() == 1);
  BOOST_TEST(parallel.global_rank() == 2);  // DP index 2 with TP=1 takes element [2]
  parallel.tensor_parallel_size = 2;
  parallel.rank = 1;
  BOOST_TEST(parallel.global_rank() == 5);
}

BOOST_AUTO_TEST_SUITE_END()
