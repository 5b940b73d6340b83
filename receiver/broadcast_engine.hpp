// BroadcastWeightTransferEngine: the receive side of vLLM's nccl protocol over any
// transport::Communicator: the `gloo` backend uses it with a gloo communicator, the `nccl`
// backend with an NCCL one, so the sequencing exists once.
//
// Unpacked: one broadcast per parameter, in update_info order, each loaded as it lands.
// Every parameter (or chunk) of one update comes from its `src`, a group rank below
// rank_offset (vLLM 0.34's several broadcasters; 0 when the trainer does not say). An update of
// empty lists reuses the metadata of the previous update from the same `src`. With the init's
// `use_load_plan`, every update must be a subset of the init `metadata`.
// Packed: uint8 chunks cut by vLLM's chunk rule from the round's metadata alone, received into
// `packed_num_buffers` reusable buffers; slices whose offset is misaligned for their dtype are
// copied out, the rest are views. A failure mid-transfer leaves the group unusable: it is torn
// down, and a new init_weight_transfer_engine opens a fresh one.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/chunk_plan.hpp"
#include "protocol/nccl_info.hpp"
#include "receiver/weight_transfer_engine.hpp"
#include "transport/communicator.hpp"

namespace hotswap::receiver {

class BroadcastWeightTransferEngine
    : public TypedWeightTransferEngine<protocol::NcclInitInfo, protocol::NcclUpdateInfo> {
 public:
  // Opens the group for this worker's `rank` (rank_offset + its global inference rank).
  using CommunicatorFactory = std::function<std::unique_ptr<transport::Communicator>(
      const protocol::NcclInitInfo& init_info, int rank, std::chrono::milliseconds timeout)>;

  BroadcastWeightTransferEngine(EngineContext context, std::string name,
                                CommunicatorFactory factory);

  std::string_view name() const override { return name_; }
  void start_weight_update() override;
  void finish_weight_update() override;
  void shutdown() override;

 protected:
  void init_transfer_channel(const protocol::NcclInitInfo& init_info) override;
  void receive_weights(const protocol::NcclUpdateInfo& update_info) override;

 private:
  void receive_unpacked(const std::vector<protocol::ParamMeta>& params, int root);
  void receive_packed(const std::vector<protocol::ParamMeta>& params, int root,
                      const protocol::PackingParams& packing);
  // Each chunk straight into its part of the model's staged copies (contiguous_destination).
  void receive_packed_in_place(const std::vector<protocol::ParamMeta>& params, int root,
                               const protocol::ChunkPlan& plan, const at::Tensor& destination);
  // Hands one received chunk's tensors to the model (which copies them out of `received`).
  void unpack(const std::vector<protocol::ParamMeta>& params, const protocol::Chunk& chunk,
              const at::Tensor& received);

  std::string name_;
  CommunicatorFactory factory_;
  std::unique_ptr<transport::Communicator> communicator_;
  protocol::PackingParams packing_;  // from the handshake
  std::int64_t broadcasters_ = 1;    // the handshake's rank_offset: the group ranks that send
  std::vector<at::Tensor> buffers_;  // packed receive buffers, reused across rounds
  // For an update that sends empty lists: each src's previous metadata (vLLM keys it so).
  std::map<std::int64_t, std::vector<protocol::ParamMeta>> last_params_;
  std::optional<std::vector<protocol::ParamMeta>> load_plan_;  // use_load_plan's manifest
};

// Opens a GlooCommunicator for a worker rank (a ValueError for unique-id rendezvous).
BroadcastWeightTransferEngine::CommunicatorFactory gloo_communicator_factory();

// The `gloo` backend: BroadcastWeightTransferEngine over GlooCommunicator.
std::unique_ptr<WeightTransferEngine> make_gloo_engine(const EngineContext& context);

}  // namespace hotswap::receiver
