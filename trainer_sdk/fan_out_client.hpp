// FanOutClient: one WeightSyncClient over many workers (data-parallel replicas). Every call
// reaches every worker at once and returns when all are done; the first failure is raised as
// its own kind, its message prefixed with the worker it came from. This is how a multi-replica
// deployment is driven as one unit (vLLM's Ray client does the same over its handles).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainer_sdk/zmq_weight_sync_client.hpp"

namespace hotswap::trainer_sdk {

class FanOutClient : public WeightSyncClient {
 public:
  explicit FanOutClient(std::vector<std::shared_ptr<ZmqWeightSyncClient>> workers);

  void init_weight_transfer_engine(const nlohmann::json& init_info) override;
  void start_weight_update() override;
  void update_weights(const nlohmann::json& update_info) override;
  void finish_weight_update(const std::optional<std::string>& weight_version) override;
  WorkerDigests checkpoint_checksums() override;
  void start_adapter_update(const AdapterTarget& adapter) override;
  WorkerDigests adapter_checksums(const std::string& lora_name) override;
  void shutdown_weight_transfer_engine() override;
  void abort_and_shutdown_weight_transfer_engine() override;

  const std::vector<std::shared_ptr<ZmqWeightSyncClient>>& workers() const { return workers_; }
  // The inference ranks behind every endpoint: get_world_size (without data parallelism, as each
  // endpoint is one replica) summed, as vLLM's recipe sizes the transfer group. A transfer group
  // is this plus its broadcasting trainer ranks.
  int inference_world_size() const;

 private:
  void each(const std::function<void(ZmqWeightSyncClient&)>& call);
  // Every worker's digests from `fetch`, in the order of workers().
  WorkerDigests gather(const std::function<WorkerDigests(ZmqWeightSyncClient&)>& fetch);

  std::vector<std::shared_ptr<ZmqWeightSyncClient>> workers_;
};

}  // namespace hotswap::trainer_sdk
