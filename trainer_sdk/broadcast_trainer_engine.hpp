// BroadcastTrainerEngine: the transmit side of vLLM's nccl protocol over any
// transport::Communicator (gloo here, NCCL on GPUs), keeping every rule of vLLM's
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
                         std::shared_ptr<WeightSource> source, const GlooTrainerInitInfo& info);

 private:
  void transmit(const std::vector<protocol::ParamMeta>& meta);

  GlooTrainerInitInfo info_;
  std::unique_ptr<transport::Communicator> communicator_;
};

// The sender's half of a gloo handshake, shared by the gloo and sparse_gloo engines: ships
// `worker_init_info` on a side thread while this thread hosts the store and joins the group as
// rank 0 (both must rendezvous together), then waits for the workers' answer. If the group
// fails, a failure the workers already reported is raised instead: it is the better diagnosis.
std::unique_ptr<transport::Communicator> open_gloo_group_as_sender(
    const std::shared_ptr<WeightSyncClient>& client, const protocol::NcclInitInfo& worker_init_info,
    std::chrono::milliseconds timeout);

// Writes `tensor`'s bytes into `chunk` (a uint8 buffer) where `slice` places them: vLLM's packed
// layout, plain concatenation with no padding.
void pack_slice(at::Tensor& chunk, const protocol::ChunkSlice& slice, const at::Tensor& tensor);

// One pass of a source checked, element by element, against the metadata the worker was sent
// (vLLM's `_checked_iter`): a disagreement would make the two sides cut the stream differently,
// so it is a ValueError naming the first divergent parameter, before it is sent.
class CheckedStream {
 public:
  CheckedStream(std::unique_ptr<WeightStream> stream, const std::vector<protocol::ParamMeta>& meta)
      : stream_(std::move(stream)), meta_(meta) {}
  // The next tensor, contiguous, on the CPU.
  at::Tensor next();
  // After the last tensor: the source must have ended too.
  void finish();
  // How many tensors next() has returned: the metadata index of the next one.
  std::size_t position() const { return sent_; }

 private:
  std::unique_ptr<WeightStream> stream_;
  const std::vector<protocol::ParamMeta>& meta_;
  std::size_t sent_ = 0;
};

}  // namespace hotswap::trainer_sdk
