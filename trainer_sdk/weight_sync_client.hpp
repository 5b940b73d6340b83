// WeightSyncClient: *how to reach* the inference side, vLLM's VLLMWeightSyncClient. However a
// client is built, it bottoms out in the same four calls. Two rules for every implementation:
// reach every replica and block until all of them are done, and raise on failure (a swallowed
// error turns a failed sync into silently stale weights, or into a hang).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotswap::trainer_sdk {

class WeightSyncClient {
 public:
  virtual ~WeightSyncClient();

  virtual void init_weight_transfer_engine(const nlohmann::json& init_info) = 0;
  virtual void start_weight_update() = 0;
  // `update_info` is one object, or a list with one object per inference rank.
  virtual void update_weights(const nlohmann::json& update_info) = 0;
  virtual void finish_weight_update(const std::optional<std::string>& weight_version) = 0;

  // Checkpoint-format SHA-256 digests (Hugging Face name → hex) of every worker this client
  // reaches, each with a name for messages. Clients that cannot fetch them raise.
  using WorkerDigests = std::vector<std::pair<std::string, std::map<std::string, std::string>>>;
  virtual WorkerDigests checkpoint_checksums();

  // Tears every worker's data channel down, ending a session a trainer cannot finish (vLLM's
  // shutdown_weight_transfer_engine); a new init opens it again. Clients that cannot raise.
  virtual void shutdown_weight_transfer_engine();
  // The same, ending a session in progress first: for a trainer whose round failed after every
  // byte had landed (hotswap workers' `abort_update`; a vLLM worker refuses it mid-update, as
  // does the default here, which calls shutdown_weight_transfer_engine()).
  virtual void abort_and_shutdown_weight_transfer_engine();
};

}  // namespace hotswap::trainer_sdk
