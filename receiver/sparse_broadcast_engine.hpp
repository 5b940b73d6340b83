// SparseBroadcastWeightTransferEngine: vLLM's sparse_nccl protocol over any Communicator
// (`sparse_gloo` here, `sparse_nccl` on GPUs). Per patch, in update_info order: a broadcast of
// `n` int32 flat indices into the full checkpoint-shaped tensor, then one of `n` values. Patches
// are in checkpoint coordinates and go through the model's name mapping; each is checked when it
// arrives, and the session's patches are applied all or nothing at finish, between two
// generation steps: a trainer that dies before finish leaves the served weights as they were,
// as with every other backend. No layerwise reload and no draft updates, as in vLLM.
#pragma once

#include "protocol/sparse_nccl_info.hpp"
#include "receiver/broadcast_engine.hpp"

namespace hotswap::receiver {

class SparseBroadcastWeightTransferEngine
    : public TypedWeightTransferEngine<protocol::NcclInitInfo, protocol::SparseNcclUpdateInfo> {
 public:
  SparseBroadcastWeightTransferEngine(EngineContext context, std::string name,
                                      BroadcastWeightTransferEngine::CommunicatorFactory factory);

  std::string_view name() const override { return name_; }
  bool supports_draft_weight_update() const override { return false; }
  void start_weight_update() override { pending_.clear(); }
  void finish_weight_update() override;
  void abort_weight_update() override { pending_.clear(); }
  void shutdown() override;

 protected:
  void init_transfer_channel(const protocol::NcclInitInfo& init_info) override;
  void receive_weights(const protocol::SparseNcclUpdateInfo& update_info) override;

 private:
  std::string name_;
  BroadcastWeightTransferEngine::CommunicatorFactory factory_;
  std::unique_ptr<transport::Communicator> communicator_;
  std::vector<model_loader::WeightPatch> pending_;  // this session's, applied at finish
};

std::unique_ptr<WeightTransferEngine> make_sparse_gloo_engine(const EngineContext& context);

}  // namespace hotswap::receiver
