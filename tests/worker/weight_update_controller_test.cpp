#include "worker/weight_update_controller.hpp"

#include <boost/test/unit_test.hpp>

#include "model_loader/model_test_support.hpp"
#include "protocol/errors.hpp"
#include "receiver/weight_transfer_engine_factory.hpp"

using namespace hotswap;
using nlohmann::json;
using testing::CheckpointDir;
using worker::WeightUpdateController;

namespace {

struct Fixture {
  model_loader::ModelConfig config = testing::tiny_config(model_loader::architectures::kLlama);
  CheckpointDir old_ckpt{config, 700};
  CheckpointDir new_ckpt{config, 800};
  std::shared_ptr<model_loader::ServableModel> model = old_ckpt.load();
  WeightUpdateController controller{
      receiver::WeightTransferEngineFactory::create_engine(
          receiver::EngineContext{{"disk"}, {}, c10::Device(c10::kCPU), model}),
      receiver::ParallelConfig{}};

  json path_of(const CheckpointDir& c) const { return {{"path", c.dir.path.string()}}; }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(weight_update_controller)

BOOST_FIXTURE_TEST_CASE(a_round_commits_and_sets_the_version, Fixture) {
  auto before = model->runtime_checksums("");
  controller.init_weight_transfer_engine(json::object());
  controller.start_weight_update();
  controller.update_weights(path_of(new_ckpt));
  BOOST_TEST(*controller.weight_version() == "default");  // vLLM 0.34's label before any
  controller.finish_weight_update("step-7");
  BOOST_TEST(*controller.weight_version() == "step-7");
  BOOST_TEST((model->runtime_checksums("") != before));
  controller.update_weight_version("step-7b");
  BOOST_TEST(*controller.weight_version() == "step-7b");
}

BOOST_FIXTURE_TEST_CASE(calls_out_of_order_use_vllms_messages, Fixture) {
  HOTSWAP_CHECK_THROW_MSG(controller.update_weights(path_of(new_ckpt)), protocol::RuntimeError,
                          "start_weight_update must be called before update_weights.");
  HOTSWAP_CHECK_THROW_MSG(controller.finish_weight_update(std::nullopt), protocol::RuntimeError,
                          "finish_weight_update called without a matching start_weight_update.");
  controller.start_weight_update();
  HOTSWAP_CHECK_THROW_MSG(controller.start_weight_update(), protocol::RuntimeError,
                          "start_weight_update called while a weight update is already active. "
                          "Call finish_weight_update first.");
}

BOOST_FIXTURE_TEST_CASE(an_update_error_ends_the_session_and_keeps_the_weights, Fixture) {
  auto before = model->runtime_checksums("");
  controller.start_weight_update();
  BOOST_CHECK_THROW(controller.update_weights({{"path", "relative/dir"}}), protocol::ValueError);
  BOOST_TEST(!controller.session_active());
  BOOST_TEST((model->runtime_checksums("") == before));
  controller.start_weight_update();  // clean
  controller.update_weights(path_of(new_ckpt));
  controller.finish_weight_update(std::nullopt);
  BOOST_TEST(*controller.weight_version() == "default");
}

BOOST_FIXTURE_TEST_CASE(a_new_handshake_ends_a_session_its_trainer_never_finished, Fixture) {
  auto before = model->runtime_checksums("");
  controller.start_weight_update();
  controller.update_weights(path_of(new_ckpt));            // ... and the trainer dies before finish
  BOOST_TEST((model->runtime_checksums("") == before));    // staged: nothing committed
  controller.init_weight_transfer_engine(json::object());  // a new trainer
  BOOST_TEST(!controller.session_active());
  controller.start_weight_update();
  controller.update_weights(path_of(new_ckpt));
  controller.finish_weight_update("fresh");
  BOOST_TEST(*controller.weight_version() == "fresh");
}

BOOST_FIXTURE_TEST_CASE(a_per_rank_list_gives_each_worker_its_element, Fixture) {
  receiver::ParallelConfig rank2;
  rank2.data_parallel_rank = 2;
  rank2.data_parallel_size = 4;
  json list = {{{"path", "/a"}}, {{"path", "/b"}}, {{"path", "/c"}}};
  BOOST_TEST(WeightUpdateController::select_update_info(list, rank2)->at("path") == "/c");
  BOOST_TEST(WeightUpdateController::select_update_info(list, {})->at("path") == "/a");
  rank2.data_parallel_rank = 3;
  HOTSWAP_CHECK_THROW_MSG(WeightUpdateController::select_update_info(list, rank2),
                          protocol::ValueError,
                          "`update_info` has 3 entries but this worker takes entry 3");
  BOOST_TEST(!WeightUpdateController::select_update_info(json::array(), {}).has_value());
  HOTSWAP_CHECK_THROW_MSG(WeightUpdateController::select_update_info(json(5), {}),
                          protocol::ValueError, "must be an object or a list of objects");
  // Through the controller: element 0 is this worker's.
  controller.start_weight_update();
  controller.update_weights(json::array({path_of(new_ckpt), {{"path", "/elsewhere"}}}));
  controller.finish_weight_update(std::nullopt);
}

// hotswap has no speculative decoding: a draft session is refused as vLLM refuses it when no
// draft model is configured, and leaves no session behind.
BOOST_FIXTURE_TEST_CASE(a_draft_session_is_refused_with_vllms_message_and_changes_nothing,
                        Fixture) {
  auto before = model->runtime_checksums("");
  HOTSWAP_CHECK_THROW_MSG(controller.start_draft_weight_update(), protocol::RuntimeError,
                          "Draft model weight update requested, but no draft model is configured.");
  BOOST_TEST(!controller.session_active());
  controller.start_weight_update();  // the next round starts clean
  controller.update_weights(path_of(new_ckpt));
  controller.finish_weight_update(std::nullopt);
  BOOST_TEST((model->runtime_checksums("") != before));
}

BOOST_AUTO_TEST_CASE(without_an_engine_every_weight_call_says_it_is_not_configured) {
  WeightUpdateController none(nullptr, {});
  HOTSWAP_CHECK_THROW_MSG(none.start_weight_update(), protocol::RuntimeError,
                          "Weight transfer not configured. Please set weight_transfer_config to "
                          "enable weight transfer.");
}

BOOST_AUTO_TEST_SUITE_END()
