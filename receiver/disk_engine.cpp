#include "receiver/disk_engine.hpp"

#include "model_loader/checkpoint.hpp"

namespace hotswap::receiver {

void DiskWeightTransferEngine::start_weight_update() {
  model().start_reload();
  active_ = true;
  loaded_ = false;
}

void DiskWeightTransferEngine::receive_weights(const protocol::DiskUpdateInfo& update_info) {
  if (!active_) {
    throw protocol::RuntimeError("start_weight_update must be called before update_weights.");
  }
  try {
    if (loaded_) {
      throw protocol::RuntimeError(
          "The disk backend accepts exactly one checkpoint per update session");
    }
    auto checkpoint = model_loader::Checkpoint::open(update_info.path);
    model().load_weights_from(checkpoint);
    add_bytes_received(checkpoint.total_bytes());
    loaded_ = true;
  } catch (...) {
    // Any failure ends the session; in staged mode nothing live was touched.
    abort_weight_update();
    throw;
  }
}

void DiskWeightTransferEngine::finish_weight_update() {
  if (!active_) {
    throw protocol::RuntimeError(
        "finish_weight_update called without a matching start_weight_update.");
  }
  active_ = false;
  if (!loaded_) {
    model().abort_reload();
    throw protocol::RuntimeError("No checkpoint was loaded during the shared-disk update session");
  }
  model().finish_reload();
}

void DiskWeightTransferEngine::abort_weight_update() {
  if (active_) model().abort_reload();
  active_ = false;
  loaded_ = false;
}

void DiskWeightTransferEngine::shutdown() {
  abort_weight_update();
}

}  // namespace hotswap::receiver
