// TrainerWeightTransferEngine: *how to transmit*, the trainer side of one backend (vLLM's
// TrainerWeightTransferEngine). Built by WeightTransferTrainerFactory::trainer_init on every
// trainer rank. The sender (rank 0) drives the four calls through the client and transmits;
// other ranks hold the same client but never call it, and still run every trainer-side
// collective (metadata, iteration) so that the group stays aligned.
//
// Full-resync backends take a WeightSource at trainer_init and replay it on each send_weights();
// delta backends take no source and receive each round's payload as an argument of their own
// send method. Two rules bind every engine: drain before returning (send_weights never returns
// with bytes in flight), and never join a control call on the error path (if the transmit
// fails while the worker is blocked in the matching receive, raise without waiting for it).
//
// The sender's round is the base's (run_round): start, the engine's transfer, finish, with the
// fault-injection points of round_hook.hpp between them, so that every engine passes them alike.
// An engine's send_weights does only what is its own: the reading every rank does, the checks
// that must fail before any RPC, and the transfer it hands to run_round.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "trainer_sdk/weight_source.hpp"
#include "trainer_sdk/weight_sync_client.hpp"

namespace hotswap::trainer_sdk {

// What a round may add to send_weights: the version the workers commit, a bit-for-bit check of
// what they serve against the source after finish, and the LoRA adapter the round updates
// instead of the model (the source then yields the adapter's tensors by PEFT's saved names,
// `...q_proj.lora_A.weight`: the names the workers key the adapter's digests by).
struct SendOptions {
  std::optional<std::string> weight_version;
  bool verify = false;
  std::optional<AdapterTarget> adapter = std::nullopt;
};

class TrainerWeightTransferEngine {
 public:
  TrainerWeightTransferEngine(std::shared_ptr<WeightSyncClient> client,
                              std::shared_ptr<WeightSource> source, bool is_sender);
  virtual ~TrainerWeightTransferEngine();
  TrainerWeightTransferEngine(const TrainerWeightTransferEngine&) = delete;
  TrainerWeightTransferEngine& operator=(const TrainerWeightTransferEngine&) = delete;

  // Pushes the source's weights and drives start → update(s) → finish. Called on every rank.
  virtual void send_weights() = 0;
  // send_weights with options. With `verify`, each rank that sends then fetches every worker's
  // checkpoint-format checksums (the adapter's, for an adapter's round) and compares them with
  // SHA-256 digests of the tensors its source holds; a mismatch is a TransferError naming the
  // worker and the tensors.
  void push(const SendOptions& options);
  // Tears down communicators and buffers. Default: nothing to tear down.
  virtual void shutdown() {}

  // Rank 0: drives the control calls (and, with one sender, moves every byte).
  bool is_sender() const { return is_sender_; }
  // Whether this rank moves bytes of a round, and so verifies what it holds after a push: the
  // sender, or every rank when several trainer ranks send.
  virtual bool sends_weights() const { return is_sender(); }

 protected:
  WeightSyncClient& client() const { return *client_; }
  // For calls that run on a side thread and must keep the client alive on their own.
  std::shared_ptr<WeightSyncClient> client_shared() const { return client_; }
  // The source, or nullptr for delta backends.
  WeightSource* source() const { return source_.get(); }
  // A non-sender rank's round: one pass over the source, sending nothing. It still iterates, as
  // vLLM's non-sender ranks do, because a sharded source may run collectives among ranks.
  void iterate_without_sending() const;
  // The version this round commits (set by push()).
  const std::optional<std::string>& round_version() const { return round_version_; }
  // The adapter this round updates instead of the model (set by push()), if any.
  const std::optional<AdapterTarget>& round_adapter() const { return round_adapter_; }

  // init_weight_transfer_engine(`payload`) on a side thread, reaching kInit while it is in
  // flight, awaited within `timeout`: the handshake of engines whose init needs nothing of the
  // trainer but the call (disk, shm, ipc).
  static void init_workers(const std::shared_ptr<WeightSyncClient>& client,
                           const nlohmann::json& payload, std::chrono::milliseconds timeout);
  // For a transfer whose bytes are in place before the call (disk's files, ipc's device memory):
  // one update_weights(`update_info`) on a side thread, reaching kMidUpdate while the workers
  // read, awaited within `timeout`.
  void update_in_place(const nlohmann::json& update_info, std::chrono::milliseconds timeout);

  // An engine's own part of a round, between start_weight_update and finish_weight_update: its
  // update_weights call(s) and the bytes they carry.
  using Transfer = std::function<void()>;
  // The sender's round: start_weight_update, `transfer`, finish_weight_update committing
  // `version`, reaching kStarted after start and kBeforeFinish before finish. If `transfer`
  // throws, so does this, without finishing: an engine that must end the workers' session on a
  // failure does so inside `transfer`, where it knows what is in flight.
  void run_round(const std::optional<std::string>& version, const Transfer& transfer);
  // For `transfer`, once an update_weights call is in flight and part of its bytes has been sent:
  // reaches kMidUpdate the first time in a round. Outside the sender's round it does nothing, so
  // that code that other ranks run too (their own sends) may call it.
  void reach_mid_update();

 private:
  std::shared_ptr<WeightSyncClient> client_;
  std::shared_ptr<WeightSource> source_;
  bool is_sender_;
  std::optional<std::string> round_version_;
  std::optional<AdapterTarget> round_adapter_;
  bool mid_update_due_ = false;  // inside run_round's transfer, until kMidUpdate is reached
};

// Compares each worker's checkpoint-format digests (adapter `lora_name`'s, when given) with the
// source's tensors (TransferError naming the worker and up to eight tensors on a mismatch).
void verify_against_source(WeightSyncClient& client, WeightSource& source,
                           const std::optional<std::string>& lora_name = std::nullopt);

}  // namespace hotswap::trainer_sdk
