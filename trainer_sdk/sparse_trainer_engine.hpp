// SparseTrainerEngine: the trainer side of vLLM's sparse_nccl protocol over a Communicator
// (`sparse_gloo` here). A delta backend: it takes no WeightSource; each round's patches are the
// argument of send_weights(patches). Patches are checked before any RPC (a malformed one
// discovered by the worker mid-broadcast would wedge both sides); an empty round sends
// nothing at all; non-sender ranks do nothing.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "protocol/backend_names.hpp"
#include "protocol/timeouts.hpp"
#include "trainer_sdk/sender_group.hpp"
#include "trainer_sdk/trainer_init_info.hpp"
#include "trainer_sdk/trainer_settings.hpp"
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

// What the sparse broadcast backends share (vLLM's SparseNCCLTrainerInitInfo's fields).
struct SparseTransferParams {
  std::string master_address;
  int master_port = 0;
  int world_size = 0;
  std::chrono::milliseconds timeout{protocol::kDefaultTimeout};
};

struct SparseGlooTrainerInitInfo : TrainerInitInfoFor<SparseGlooTrainerInitInfo>,
                                   SparseTransferParams {
  static constexpr std::string_view backend = protocol::backends::kSparseGloo;
  SparseGlooTrainerInitInfo(std::string master_address, int master_port, int world_size, int rank)
      : TrainerInitInfoFor(rank),
        SparseTransferParams{std::move(master_address), master_port, world_size} {}

  // A delta backend: each round's patches go to send_weights(patches), with no WeightSource.
  static constexpr bool takes_source = false;
  static constexpr std::array settings_read = {settings::kMasterAddress, settings::kMasterPort};
  static SparseGlooTrainerInitInfo from_settings(const TrainerSettings& s) {
    SparseGlooTrainerInitInfo info(s.master_address, s.master_port, s.world_size, s.rank);
    info.timeout = s.timeout;
    return info;
  }
};

struct SparseNcclTrainerInitInfo : TrainerInitInfoFor<SparseNcclTrainerInitInfo>,
                                   SparseTransferParams {
  static constexpr std::string_view backend = protocol::backends::kSparseNccl;
  SparseNcclTrainerInitInfo(std::string master_address, int master_port, int world_size, int rank)
      : TrainerInitInfoFor(rank),
        SparseTransferParams{std::move(master_address), master_port, world_size} {}
  int device = 0;              // the CUDA device this trainer sends from
  bool use_unique_id = false;  // as NcclTrainerInitInfo::use_unique_id

  static constexpr bool takes_source = false;  // as SparseGlooTrainerInitInfo's
  static constexpr std::array settings_read = {settings::kMasterAddress, settings::kMasterPort,
                                               settings::kDevice, settings::kNcclUniqueId};
  static SparseNcclTrainerInitInfo from_settings(const TrainerSettings& s) {
    SparseNcclTrainerInitInfo info(s.master_address, s.master_port, s.world_size, s.rank);
    info.timeout = s.timeout;
    info.device = s.device;
    info.use_unique_id = s.use_nccl_unique_id;
    return info;
  }
};

class SparseTrainerEngine : public TrainerWeightTransferEngine {
 public:
  using InitInfo = SparseGlooTrainerInitInfo;

  static std::unique_ptr<SparseTrainerEngine> trainer_init(const SparseGlooTrainerInitInfo& info,
                                                           std::shared_ptr<WeightSyncClient> client,
                                                           std::shared_ptr<WeightSource> source);
  SparseTrainerEngine(std::shared_ptr<WeightSyncClient> client, const SparseTransferParams& params,
                      bool is_sender, SenderGroup group);

  // A delta backend has nothing to resend: a RuntimeError pointing at send_weights(patches).
  void send_weights() override;
  // One round: start, update (concurrent with the broadcasts), finish.
  void send_weights(const std::vector<SparsePatch>& patches,
                    const std::optional<std::string>& weight_version = std::nullopt);
  void shutdown() override;

 protected:
  template <class Engine>
  static std::unique_ptr<Engine> open(const TrainerInitInfo& info,
                                      const SparseTransferParams& params, SenderGroup group,
                                      std::shared_ptr<WeightSyncClient> client,
                                      std::shared_ptr<WeightSource> source);

 private:
  SparseTransferParams info_;
  SenderGroup group_;
  std::unique_ptr<transport::Communicator> communicator_;
};

// The `sparse_nccl` backend's trainer side: the same rounds from a GPU, over NCCL.
class SparseNcclTrainerEngine final : public SparseTrainerEngine {
 public:
  using InitInfo = SparseNcclTrainerInitInfo;
  using SparseTrainerEngine::SparseTrainerEngine;

  static std::unique_ptr<SparseNcclTrainerEngine> trainer_init(
      const SparseNcclTrainerInitInfo& info, std::shared_ptr<WeightSyncClient> client,
      std::shared_ptr<WeightSource> source);
};

void validate_patches(const std::vector<SparsePatch>& patches);

}  // namespace hotswap::trainer_sdk
