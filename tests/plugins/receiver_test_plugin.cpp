// A receive engine in a shared library of its own, loaded with dlopen by the factory tests:
// the C++ form of a third-party backend registered lazily by module path.
#include <memory>

#include "protocol/nccl_info.hpp"
#include "receiver/weight_transfer_engine.hpp"

namespace {

class PluginEngine final
    : public hotswap::receiver::TypedWeightTransferEngine<hotswap::protocol::NcclInitInfo,
                                                          hotswap::protocol::NcclUpdateInfo> {
 public:
  using TypedWeightTransferEngine::TypedWeightTransferEngine;
  std::string_view name() const override { return "PluginWeightTransferEngine"; }
  void start_weight_update() override {}
  void finish_weight_update() override {}
  void shutdown() override {}

 protected:
  void init_transfer_channel(const hotswap::protocol::NcclInitInfo&) override {}
  void receive_weights(const hotswap::protocol::NcclUpdateInfo&) override {}
};

}  // namespace

extern "C" std::unique_ptr<hotswap::receiver::WeightTransferEngine> hotswap_test_create_engine(
    const hotswap::receiver::EngineContext& context) {
  return std::make_unique<PluginEngine>(context);
}
