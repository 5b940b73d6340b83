#include "receiver/disk_engine.hpp"

#include <boost/test/unit_test.hpp>

#include "model_loader/model_test_support.hpp"
#include "protocol/errors.hpp"
#include "receiver/weight_transfer_engine_factory.hpp"
#include "transport/tensor_digest.hpp"

using namespace hotswap;
using testing::CheckpointDir;

namespace {

struct Fixture {
  model_loader::ModelConfig config = testing::tiny_config(model_loader::architectures::kQwen3);
  CheckpointDir old_ckpt{config, 400};
  CheckpointDir new_ckpt{config, 500};
  std::shared_ptr<model_loader::ServableModel> model = old_ckpt.load();
  std::unique_ptr<receiver::WeightTransferEngine> engine =
      receiver::WeightTransferEngineFactory::create_engine(
          receiver::EngineContext{{"disk"}, {}, c10::Device(c10::kCPU), model});

  nlohmann::json path_of(const CheckpointDir& c) const { return {{"path", c.dir.path.string()}}; }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(disk_engine)

BOOST_FIXTURE_TEST_CASE(a_session_loads_the_named_checkpoint, Fixture) {
  BOOST_TEST(engine->name() == "DiskWeightTransferEngine");
  engine->init_transfer_engine(nlohmann::json::object());
  engine->start_weight_update();
  engine->update_weights(path_of(new_ckpt));
  engine->finish_weight_update();
  auto file = new_ckpt.open();
  for (const auto& [name, digest] : model->checkpoint_checksums()) {
    BOOST_TEST(digest == transport::sha256_hex(file.tensor(name)), name);
  }
}

BOOST_FIXTURE_TEST_CASE(payload_errors_use_vllms_messages_and_keep_the_weights, Fixture) {
  auto before = model->runtime_checksums("");
  HOTSWAP_CHECK_THROW_MSG(engine->init_transfer_engine({{"path", "/x"}}), protocol::ValueError,
                          "Invalid init_info for DiskWeightTransferEngine: "
                          "DiskWeightTransferInitInfo.__init__() got an unexpected keyword "
                          "argument 'path'");
  engine->start_weight_update();
  HOTSWAP_CHECK_THROW_MSG(engine->update_weights({{"path", "relative"}}), protocol::ValueError,
                          "Invalid update_info for DiskWeightTransferEngine: `path` must be an "
                          "absolute local directory");
  // The payload never reached the data plane; the session is still open and has nothing.
  HOTSWAP_CHECK_THROW_MSG(engine->finish_weight_update(), protocol::RuntimeError,
                          "No checkpoint was loaded during the shared-disk update session");
  BOOST_TEST(!model->reload_active());
  BOOST_TEST((model->runtime_checksums("") == before));
}

BOOST_FIXTURE_TEST_CASE(exactly_one_checkpoint_per_session, Fixture) {
  engine->start_weight_update();
  engine->update_weights(path_of(new_ckpt));
  HOTSWAP_CHECK_THROW_MSG(engine->update_weights(path_of(old_ckpt)), protocol::RuntimeError,
                          "The disk backend accepts exactly one checkpoint per update session");
  BOOST_TEST(!model->reload_active());  // the failure ended the session
  engine->start_weight_update();
  HOTSWAP_CHECK_THROW_MSG(engine->finish_weight_update(), protocol::RuntimeError,
                          "No checkpoint was loaded during the shared-disk update session");
  BOOST_TEST(!model->reload_active());
}

BOOST_FIXTURE_TEST_CASE(a_checkpoint_that_does_not_fit_leaves_every_weight_as_it_was, Fixture) {
  auto other = config;
  other.intermediate_size = 40;
  CheckpointDir wrong(other, 600);
  auto before = model->runtime_checksums("");
  engine->start_weight_update();
  HOTSWAP_CHECK_THROW_MSG(engine->update_weights(path_of(wrong)), protocol::ValueError,
                          "has shape [32, 40] but the model's is [32, 48]");
  BOOST_TEST((model->runtime_checksums("") == before));
  BOOST_TEST(!model->reload_active());
  HOTSWAP_CHECK_THROW_MSG(engine->finish_weight_update(), protocol::RuntimeError,
                          "without a matching start_weight_update");
  // The next session is clean.
  engine->start_weight_update();
  engine->update_weights(path_of(new_ckpt));
  engine->finish_weight_update();
  BOOST_TEST((model->runtime_checksums("") != before));
}

BOOST_AUTO_TEST_CASE(disk_is_a_built_in_backend) {
  BOOST_TEST(receiver::WeightTransferEngineFactory::is_registered("disk"));
}

BOOST_AUTO_TEST_SUITE_END()
