// BroadcastTrainerEngine: the transmit side of vLLM's nccl protocol over any
// transport::Communicator (gloo on the CPU, NCCL on GPUs), keeping every rule of vLLM's
// NCCLTrainerWeightTransferEngine:
//  - trainer_init: the sender ships the wire params in init_info (rank_offset 1) on a side
//    thread while it opens rank 0 of the group here, since both must rendezvous together;
//  - send_weights: metadata → start → update_weights on a side thread, concurrent with the
//    broadcasts → finish. If the update call has already failed, raise before broadcasting; if
//    a broadcast fails, raise at once without waiting for the update call (the worker is blocked
//    in the matching collective); iteration is checked against metadata with vLLM's messages;
//  - non-sender ranks never touch the client but still read metadata and iterate the source.
#pragma once

#include <functional>
#include <memory>

#include "protocol/chunk_plan.hpp"
#include "trainer_sdk/gloo_trainer_init_info.hpp"
#include "trainer_sdk/sender_group.hpp"
#include "trainer_sdk/trainer_weight_transfer_engine.hpp"
#include "transport/communicator.hpp"

namespace hotswap::trainer_sdk {

class BroadcastTrainerEngine : public TrainerWeightTransferEngine {
 public:
  using InitInfo = GlooTrainerInitInfo;

  static std::unique_ptr<BroadcastTrainerEngine> trainer_init(
      const GlooTrainerInitInfo& init_info, std::shared_ptr<WeightSyncClient> client,
      std::shared_ptr<WeightSource> source);

  void send_weights() override;
  void shutdown() override;

  BroadcastTrainerEngine(std::shared_ptr<WeightSyncClient> client,
                         std::shared_ptr<WeightSource> source,
                         const BroadcastTransferParams& params, bool is_sender, SenderGroup group);

 protected:
  // Checks the params, builds the engine and, on the sender, opens the group.
  template <class Engine>
  static std::unique_ptr<Engine> open(const TrainerInitInfo& info,
                                      const BroadcastTransferParams& params, SenderGroup group,
                                      std::shared_ptr<WeightSyncClient> client,
                                      std::shared_ptr<WeightSource> source);

 private:
  void transmit(const std::vector<protocol::ParamMeta>& meta);

  BroadcastTransferParams info_;
  SenderGroup group_;
  std::unique_ptr<transport::Communicator> communicator_;
};

// The `nccl` backend's trainer side: BroadcastTrainerEngine from a GPU, over NCCL, with either
// of vLLM's rendezvous modes (trainer_sdk/sender_group.hpp).
class NcclTrainerEngine final : public BroadcastTrainerEngine {
 public:
  using InitInfo = NcclTrainerInitInfo;
  using BroadcastTrainerEngine::BroadcastTrainerEngine;

  static std::unique_ptr<NcclTrainerEngine> trainer_init(const NcclTrainerInitInfo& init_info,
                                                         std::shared_ptr<WeightSyncClient> client,
                                                         std::shared_ptr<WeightSource> source);
};

// Writes `tensor`'s bytes into `chunk` (a uint8 buffer) where `slice` places them: vLLM's packed
// layout, plain concatenation with no padding.
void pack_slice(at::Tensor& chunk, const protocol::ChunkSlice& slice, const at::Tensor& tensor);

// One pass of a source checked, element by element, against the metadata the worker was sent
// (vLLM's `_checked_iter`): a disagreement would make the two sides cut the stream differently,
// so it is a ValueError naming the first divergent parameter, before it is sent.
class CheckedStream {
 public:
  CheckedStream(std::unique_ptr<WeightStream> stream, const std::vector<protocol::ParamMeta>& meta,
                c10::Device device = c10::Device(c10::kCPU))
      : stream_(std::move(stream)), meta_(meta), device_(device) {}
  // The next tensor, contiguous, on the stream's device.
  at::Tensor next();
  // After the last tensor: the source must have ended too.
  void finish();
  // How many tensors next() has returned: the metadata index of the next one.
  std::size_t position() const { return sent_; }

 private:
  std::unique_ptr<WeightStream> stream_;
  const std::vector<protocol::ParamMeta>& meta_;
  c10::Device device_;
  std::size_t sent_ = 0;
};

}  // namespace hotswap::trainer_sdk
