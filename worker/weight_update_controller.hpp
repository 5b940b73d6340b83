// WeightUpdateController: the worker's side of the four-call contract around one receive
// engine, with vLLM's session rules and messages (and one of hotswap's: a new
// init_weight_transfer_engine ends a session whose trainer never finished it): nested start, update
// or finish without start are RuntimeErrors; an error in update_weights ends the session (the
// engine drops what it staged) so the next start is clean; `update_info`
// may be one object or a per-rank list, of which this worker takes element data_parallel_rank ×
// world_size + rank; weight_version changes at commit, or alone through update_weight_version.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "receiver/weight_transfer_engine.hpp"

namespace hotswap::worker {

class WeightUpdateController {
 public:
  // `engine` may be null (no --weight-transfer-config): every weight call then fails with
  // vLLM's "Weight transfer not configured" message.
  WeightUpdateController(std::unique_ptr<receiver::WeightTransferEngine> engine,
                         receiver::ParallelConfig parallel);
  ~WeightUpdateController();

  void init_weight_transfer_engine(const nlohmann::json& init_info);
  void start_weight_update();
  // Always a RuntimeError with vLLM's message for an engine whose supports_draft_weight_update
  // is False: the worker serves no draft model.
  void start_draft_weight_update();
  void update_weights(const nlohmann::json& update_info);
  void finish_weight_update(const std::optional<std::string>& weight_version);
  void update_weight_version(const std::string& new_version);
  // Tears the engine's data channel down (vLLM's shutdown_weight_transfer_engine), ending any
  // session first; a new init_weight_transfer_engine opens it again.
  void shutdown_weight_transfer_engine();

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

  std::unique_ptr<receiver::WeightTransferEngine> engine_;
  receiver::ParallelConfig parallel_;
  mutable std::mutex mutex_;  // guards the fields below, never held across a transfer
  bool active_ = false;
  std::optional<std::string> weight_version_;
};

}  // namespace hotswap::worker
