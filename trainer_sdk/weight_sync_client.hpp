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

// A LoRA adapter a round updates instead of the model: hotswap's extension of
// start_weight_update ({"lora_name", "lora_config"}). The workers serve it under `lora_name` once
// the round finishes whole; a worker that is not hotswap refuses such a round.
struct AdapterTarget {
  std::string lora_name;
  // PEFT's adapter_config.json fields (r, lora_alpha, target_modules, use_rslora, ...): needed to
  // make an adapter the workers do not serve yet, or to change its rank; null keeps theirs.
  nlohmann::json lora_config;
};

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

  // hotswap's extension: opens a round that updates `adapter` instead of the model (the rest of
  // the round is the same calls). Clients that cannot raise.
  virtual void start_adapter_update(const AdapterTarget& adapter);
  // The digests of adapter `lora_name`'s tensors as every worker holds them, by PEFT's saved
  // names, as checkpoint_checksums gives the model's. Clients that cannot raise.
  virtual WorkerDigests adapter_checksums(const std::string& lora_name);

  // Tears every worker's data channel down, ending a session a trainer cannot finish (vLLM's
  // shutdown_weight_transfer_engine); a new init opens it again. Clients that cannot raise.
  virtual void shutdown_weight_transfer_engine();
  // The same, ending a session in progress first: for a trainer whose round failed after every
  // byte had landed (hotswap workers' `abort_update`; a vLLM worker refuses it mid-update, as
  // does the default here, which calls shutdown_weight_transfer_engine()).
  virtual void abort_and_shutdown_weight_transfer_engine();
};

}  // namespace hotswap::trainer_sdk
