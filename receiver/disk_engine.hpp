// DiskWeightTransferEngine: vLLM's shared-disk backend. The trainer writes a Hugging Face
// checkpoint to a directory both sides can read and names it in `update_info`
// ({"path": "/abs/dir"}); the worker loads it through the model's layerwise reload. Exactly one
// checkpoint per session. init_info is `{}`.
#pragma once

#include "protocol/disk_info.hpp"
#include "receiver/weight_transfer_engine.hpp"

namespace hotswap::receiver {

class DiskWeightTransferEngine final
    : public TypedWeightTransferEngine<protocol::DiskInitInfo, protocol::DiskUpdateInfo> {
 public:
  using TypedWeightTransferEngine::TypedWeightTransferEngine;

  std::string_view name() const override { return "DiskWeightTransferEngine"; }
  void start_weight_update() override;
  void finish_weight_update() override;
  void shutdown() override;
  void abort_weight_update() override;

 protected:
  void init_transfer_channel(const protocol::DiskInitInfo&) override {}
  void receive_weights(const protocol::DiskUpdateInfo& update_info) override;

 private:
  bool active_ = false;
  bool loaded_ = false;
};

}  // namespace hotswap::receiver
