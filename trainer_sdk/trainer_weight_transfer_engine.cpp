#include "trainer_sdk/trainer_weight_transfer_engine.hpp"

#include "protocol/errors.hpp"

namespace hotswap::trainer_sdk {

WeightSyncClient::~WeightSyncClient() = default;

TrainerWeightTransferEngine::TrainerWeightTransferEngine(std::shared_ptr<WeightSyncClient> client,
                                                         std::shared_ptr<WeightSource> source,
                                                         bool is_sender)
    : client_(std::move(client)), source_(std::move(source)), is_sender_(is_sender) {
  if (!client_) throw protocol::ValueError("a trainer weight transfer engine needs a client");
}

TrainerWeightTransferEngine::~TrainerWeightTransferEngine() = default;

}  // namespace hotswap::trainer_sdk
