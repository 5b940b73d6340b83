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
//
// With `trainer_ranks` > 1 every trainer rank joins the group and sends what it holds:
//  - trainer_init, on every rank: rank 0 ships the workers' init (rank_offset trainer_ranks) and
//    hosts the TCPStore, the others join it; then each rank posts its metadata() and
//    held_names() to the store, and rank 0 checks them (a disagreeing metadata, an orphaned
//    name: a ValueError with the seeds' wording, raised on every rank) and posts who sends what;
//  - send_weights, on every rank: each walks the metadata in order, advancing its own source
//    through the names its groups() cover, and joins every broadcast: as the root for what it
//    sends, into a scratch buffer otherwise. Rank 0 drives the four calls with `sender_ranks`
//    in update_info; it commits (finish_weight_update) only once every rank has said its pass
//    ended cleanly, then posts the round's outcome, and the other ranks return only when it
//    says the round committed, so a rank may verify what it sent as soon as send_weights
//    returns. The ranks must share world_size, trainer_ranks and the packing settings.
//  - A rank that fails posts why and aborts its end of the group: over gloo the peers blocked
//    in a collective fail at once (NCCL peers wait out their timeout); rank 0 reports the cause
//    a peer posted, where one did.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/chunk_plan.hpp"
#include "trainer_sdk/checked_stream.hpp"
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
                         const BroadcastTransferParams& params, int rank, SenderGroup group);

  bool sends_weights() const override { return is_sender() || many_senders(); }

 protected:
  // Checks the params, builds the engine and, on the sender, opens the group.
  template <class Engine>
  static std::unique_ptr<Engine> open(const TrainerInitInfo& info,
                                      const BroadcastTransferParams& params, SenderGroup group,
                                      std::shared_ptr<WeightSyncClient> client,
                                      std::shared_ptr<WeightSource> source);

 private:
  bool many_senders() const { return info_.trainer_ranks > 1; }
  // Many senders, at init: every rank posts its holdings; rank 0 assigns the senders.
  void agree_on_senders();
  // Rank 0's round: start, update_weights alongside the transmit, finish.
  void drive_round(const std::vector<protocol::ParamMeta>& meta);
  void send_as_rank_zero(const std::vector<protocol::ParamMeta>& meta);
  void send_as_other_rank();
  // Where this rank receives a parameter another rank sends (reused, grown as needed).
  at::Tensor scratch(const protocol::ParamMeta& meta);
  void transmit(const std::vector<protocol::ParamMeta>& meta);
  // Many senders: this round's failure, posted for the other ranks, then the group torn down.
  void fail_round(const std::string& cause);
  // Many senders, rank 0: a better diagnosis than its own broken collective, if a peer posted
  // why it failed this round.
  std::optional<std::string> peer_failure() const;
  // Many senders, rank 0, before finish: every other rank's pass ended cleanly (TransferError
  // naming the first that says it failed).
  void await_other_ranks();
  // What every rank must share to cut the stream alike, checked at init.
  nlohmann::json wire_settings() const;
  std::string round_key(const std::string& what) const;

  BroadcastTransferParams info_;
  int rank_;
  SenderGroup group_;
  std::unique_ptr<transport::Communicator> communicator_;
  // Many senders: the metadata agreed at init, who sends each of its parameters, and rounds so
  // far (the store keys of a round carry its number).
  std::vector<protocol::ParamMeta> layout_;
  std::vector<std::int64_t> senders_;
  std::uint64_t round_ = 0;
  std::optional<RankShare> share_;        // many senders: what this rank's pass visits and sends
  at::Tensor scratch_;                    // where a rank receives what others send
  std::vector<at::Tensor> pack_buffers_;  // packed chunks: two on the CPU (see transmit)
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

}  // namespace hotswap::trainer_sdk
