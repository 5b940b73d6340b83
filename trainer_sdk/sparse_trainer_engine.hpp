// SparseTrainerEngine: the trainer side of vLLM's sparse_nccl protocol over a Communicator
// (`sparse_gloo` here). A delta backend: it takes no WeightSource; each round's patches are the
// argument of send_weights(patches). Patches are checked before any RPC (a malformed one
// discovered by the worker mid-broadcast would wedge both sides); an empty round sends
// nothing at all; non-sender ranks do nothing.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "trainer_sdk/trainer_init_info.hpp"
#include "trainer_sdk/trainer_weight_transfer_engine.hpp"
#include "transport/communicator.hpp"

namespace hotswap::trainer_sdk {

// `values` at the flat (row-major) positions `indices` (1-D int32, unique) of the full
// checkpoint tensor `name` of shape `full_shape`.
struct SparsePatch {
  std::string name;
  at::Tensor indices;
  at::Tensor values;
  std::vector<std::int64_t> full_shape;
};

struct SparseGlooTrainerInitInfo : TrainerInitInfoFor<SparseGlooTrainerInitInfo> {
  static constexpr std::string_view backend = "sparse_gloo";
  SparseGlooTrainerInitInfo(std::string master_address, int master_port, int world_size, int rank)
      : TrainerInitInfoFor(rank),
        master_address(std::move(master_address)),
        master_port(master_port),
        world_size(world_size) {}
  std::string master_address;
  int master_port;
  int world_size;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

class SparseTrainerEngine : public TrainerWeightTransferEngine {
 public:
  using InitInfo = SparseGlooTrainerInitInfo;

  static std::unique_ptr<SparseTrainerEngine> trainer_init(const SparseGlooTrainerInitInfo& info,
                                                           std::shared_ptr<WeightSyncClient> client,
                                                           std::shared_ptr<WeightSource> source);
  SparseTrainerEngine(std::shared_ptr<WeightSyncClient> client,
                      const SparseGlooTrainerInitInfo& info);

  // A delta backend has nothing to resend: a RuntimeError pointing at send_weights(patches).
  void send_weights() override;
  // One round: start, update (concurrent with the broadcasts), finish.
  void send_weights(const std::vector<SparsePatch>& patches,
                    const std::optional<std::string>& weight_version = std::nullopt);
  void shutdown() override;

 private:
  SparseGlooTrainerInitInfo info_;
  std::unique_ptr<transport::Communicator> communicator_;
};

// vLLM's checks on a round of patches (ValueError naming the patch and what is wrong).
void validate_patches(const std::vector<SparsePatch>& patches);

}  // namespace hotswap::trainer_sdk
