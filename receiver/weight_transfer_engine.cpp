#include "receiver/weight_transfer_engine.hpp"

namespace hotswap::receiver {

WeightTransferEngine::WeightTransferEngine(EngineContext context)
    : context_(std::move(context)), target_(context_.model) {}

WeightTransferEngine::~WeightTransferEngine() = default;

void WeightTransferEngine::set_weight_update_target(
    std::shared_ptr<model_loader::LoadableModel> model) {
  if (!model) throw protocol::RuntimeError("set_weight_update_target needs a model");
  target_ = std::move(model);
}

void WeightTransferEngine::reset_weight_update_target() {
  target_ = context_.model;
}

void WeightTransferEngine::abort_weight_update() {
  if (target_) target_->abort_reload();
}

model_loader::LoadableModel& WeightTransferEngine::model() const {
  if (!target_) {
    throw protocol::RuntimeError(std::string(name()) + " has no model to load weights into");
  }
  return *target_;
}

}  // namespace hotswap::receiver
