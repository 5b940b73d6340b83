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
// Several broadcasting trainer ranks, as vLLM 0.34 has them: each parameter is broadcast by its
// first owner (ParamMeta::owners; protocol::plan_broadcasters), and only rank 0 and those
// broadcasters join the group, so the workers' rank_offset is their count. A source that says
// instead what each rank holds (held_names(), vLLM 0.33's way, with `trainer_ranks` > 1) has
// every trainer rank join, each name broadcast by its lowest holder (trainer_sdk/rank_holdings).
//  - trainer_init, on every rank: the plan is made from metadata (ownership errors raised
//    before any collective); rank 0 ships the workers' init and hosts the TCPStore, the other
//    members join it, and each posts its metadata() (and held_names()) so that rank 0 checks
//    they agree and posts who sends what; ranks outside the group only iterate in send_weights;
//  - send_weights, on every member: rank 0 makes one update_weights call per broadcaster, in
//    ascending order, each with that broadcaster's parameters in metadata order and its group
//    rank as `src` (absent when 0: vLLM 0.33's payload); every member joins each call's
//    broadcasts, as the root for its own turn, into a scratch buffer otherwise; packed chunks
//    are cut per call. A member reads its source in metadata order, the names it sends in its
//    own turn and the ones it holds but does not send around it, so a source whose reads are
//    collectives among the holders of a name needs those holders under one broadcaster (what
//    vLLM's ownership rules require of owners). Rank 0 commits (finish_weight_update) only once
//    every member has said its pass ended cleanly, then posts the round's outcome, and the other
//    members return only when it says the round committed, so a rank may verify what it sent as
//    soon as send_weights returns. The ranks must share world_size, trainer_ranks and the packing
//    settings.
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
#include "trainer_sdk/nccl_trainer_init_info.hpp"
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

  bool sends_weights() const override { return group_rank_.has_value(); }

 protected:
  // Checks the params, builds the engine and, on the sender, opens the group.
  template <class Engine>
  static std::unique_ptr<Engine> open(const TrainerInitInfo& info,
                                      const BroadcastTransferParams& params, SenderGroup group,
                                      std::shared_ptr<WeightSyncClient> client,
                                      std::shared_ptr<WeightSource> source);

 private:
  // One update_weights call: the broadcaster's group rank and its parameters' metadata indices.
  struct BroadcastCall {
    std::int64_t src = 0;
    std::vector<std::size_t> indices;
  };

  bool many_senders() const { return members_.size() > 1; }
  // Many senders, at init: every member posts its holdings; rank 0 assigns the senders (from
  // `plan` when the metadata names owners).
  void agree_on_senders(std::vector<protocol::ParamMeta> metadata,
                        const std::optional<protocol::BroadcasterPlan>& plan);
  // This round's update_weights calls, in ascending src.
  std::vector<BroadcastCall> calls_for(const std::vector<protocol::ParamMeta>& meta) const;
  // Rank 0's round: the base's, around send_calls.
  void drive_round(const std::vector<protocol::ParamMeta>& meta);
  // Rank 0's transfer: each call's update_weights alongside its transmit, then the checks that
  // must pass before the workers commit.
  void send_calls(const std::vector<protocol::ParamMeta>& meta);
  void send_as_rank_zero(const std::vector<protocol::ParamMeta>& meta);
  void send_as_other_rank();
  // Where this rank receives a parameter another rank sends (reused, grown as needed).
  at::Tensor scratch(const protocol::ParamMeta& meta);
  // One call's broadcasts, from its root's source pass `stream`.
  void transmit(CheckedStream& stream, const std::vector<protocol::ParamMeta>& meta,
                const BroadcastCall& call);
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
  // The trainer ranks in the group, ascending (rank 0 first), and this rank's place among them
  // (unset: it broadcasts nothing and stays out).
  std::vector<std::int64_t> members_{0};
  std::optional<int> group_rank_;
  SenderGroup group_;
  std::unique_ptr<transport::Communicator> communicator_;
  // Many senders: the metadata agreed at init, the group rank that sends each of its
  // parameters, and rounds so far (the store keys of a round carry its number).
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
