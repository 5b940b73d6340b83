// WeightUpdateController: the worker's side of the four-call contract around one receive
// engine, with vLLM's session rules and messages (and one of hotswap's: a new
// init_weight_transfer_engine ends a session whose trainer never finished it): nested start, update
// or finish without start are RuntimeErrors; an error in update_weights ends the session (the
// engine drops what it staged) so the next start is clean; `update_info`
// may be one object or a per-rank list, of which this worker takes element data_parallel_rank ×
// world_size + rank; weight_version changes at commit, or alone through update_weight_version.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "receiver/weight_transfer_engine.hpp"

namespace hotswap::worker {

class TensorParallelGroup;

class WeightUpdateController {
 public:
  // `engine` may be null (no --weight-transfer-config): every weight call then fails with
  // vLLM's "Weight transfer not configured" message.
  WeightUpdateController(std::unique_ptr<receiver::WeightTransferEngine> engine,
                         receiver::ParallelConfig parallel);
  // Rank 0 of a tensor-parallel worker: every call also runs on the other ranks (each with its
  // own engine and controller, taking its own element of a per-rank update_info), at the same
  // time as here; a call that fails on any rank fails, and ends the session on every rank.
  // finish_weight_update first has every rank drain its receives (the step where a transfer
  // can still fail), and only when all have does every rank commit, inside `between_steps`:
  // no rank steps the model while any commits. What remains of a commit that could fail (a
  // tensor missing from the round) fails alike on every rank, since every rank was sent the
  // same tensors: the ranks commit together or not at all.
  using BetweenSteps = std::function<void(const std::function<void()>&)>;
  void set_tensor_parallel_peers(std::shared_ptr<TensorParallelGroup> peers,
                                 BetweenSteps between_steps);
  ~WeightUpdateController();

  void init_weight_transfer_engine(const nlohmann::json& init_info);
  // `target`: what this rank's round loads into instead of the model (a LoRA adapter's staging,
  // for an adapter round), until the session ends; null: the model. `peer_params` go to the
  // other tensor-parallel ranks' start (an adapter round's `lora`: each builds its own staging).
  void start_weight_update(std::shared_ptr<model_loader::LoadableModel> target = nullptr,
                           const nlohmann::json& peer_params = nlohmann::json::object());
  // Always a RuntimeError with vLLM's message: the worker serves no draft model (for an engine
  // whose supports_draft_weight_update is false, vLLM's refusal of that engine comes first).
  void start_draft_weight_update();
  void update_weights(const nlohmann::json& update_info);
  void finish_weight_update(const std::optional<std::string>& weight_version);
  // The first half of finish on a rank that is not rank 0: the receives of the round have all
  // landed (drain_pending), or the session ends with the error.
  void prepare_finish();
  // Ends a session another rank failed (idempotent; nothing when none is active).
  void abort_weight_update();
  void update_weight_version(const std::string& new_version);
  // Tears the engine's data channel down (vLLM's shutdown_weight_transfer_engine); a new
  // init_weight_transfer_engine opens it again. Refused (RuntimeError, vLLM 0.34's message)
  // while a session is open, unless `abort_update` ends that session first (hotswap's
  // extension, for a trainer whose round failed after the bytes had landed).
  void shutdown_weight_transfer_engine(bool abort_update = false);

  std::optional<std::string> weight_version() const;
  std::uint64_t bytes_received() const { return engine_ ? engine_->bytes_received() : 0; }
  bool session_active() const;

  // This worker's element of a per-rank `update_info` list (the object itself otherwise).
  // ValueError when the list is too short or the element is not an object; nullopt for an
  // empty list (nothing for any rank this round).
  static std::optional<nlohmann::json> select_update_info(const nlohmann::json& update_info,
                                                          const receiver::ParallelConfig& parallel);

 private:
  receiver::WeightTransferEngine& engine() const;
  void end_session();
  // vLLM's RuntimeError for a finish without a session.
  void require_session_to_finish() const;
  // Runs `local` here while the other tensor-parallel ranks run `method` (just `local` at
  // tp = 1); the first error once every rank has answered.
  void on_every_rank(std::string_view method, const nlohmann::json& params,
                     const std::function<void()>& local);

  std::unique_ptr<receiver::WeightTransferEngine> engine_;
  receiver::ParallelConfig parallel_;
  mutable std::mutex mutex_;  // guards the fields below, never held across a transfer
  bool active_ = false;
  bool adapter_round_ = false;  // the session loads a LoRA adapter, not the model (target)
  // vLLM 0.34 labels the weights a worker starts with "default".
  std::optional<std::string> weight_version_ = "default";
  std::shared_ptr<TensorParallelGroup> peers_;
  BetweenSteps between_steps_;
};

}  // namespace hotswap::worker
