// A trainer engine in a shared library of its own, loaded with dlopen by the factory tests.
#include <memory>

#include "trainer_sdk/trainer_init_info.hpp"
#include "trainer_sdk/trainer_weight_transfer_engine.hpp"

namespace {

class PluginTrainerEngine final : public hotswap::trainer_sdk::TrainerWeightTransferEngine {
 public:
  using TrainerWeightTransferEngine::TrainerWeightTransferEngine;
  void send_weights() override {
    if (!is_sender()) return;
    client().start_weight_update();
    client().update_weights({{"plugin", true}});
    client().finish_weight_update(std::nullopt);
  }
};

}  // namespace

extern "C" std::unique_ptr<hotswap::trainer_sdk::TrainerWeightTransferEngine>
hotswap_test_trainer_init(const hotswap::trainer_sdk::TrainerInitInfo& init_info,
                          std::shared_ptr<hotswap::trainer_sdk::WeightSyncClient> client,
                          std::shared_ptr<hotswap::trainer_sdk::WeightSource> source) {
  auto engine = std::make_unique<PluginTrainerEngine>(client, source, init_info.is_sender());
  if (init_info.is_sender()) client->init_weight_transfer_engine({{"from", "plugin"}});
  return engine;
}
