// ZmqWeightSyncClient: a WeightSyncClient for one hotswap worker over its ZeroMQ JSON-RPC
// control socket. Every call has a timeout and raises the worker's error as its typed exception
// (ValueError, RuntimeError, TimeoutError, TransferError) with the worker's message. Calls are
// thread-safe: each uses a socket of its own, so an update call left running on a side thread
// never shares a socket with the next call.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "trainer_sdk/rpc_client.hpp"
#include "trainer_sdk/weight_sync_client.hpp"

namespace hotswap::trainer_sdk {

class ZmqWeightSyncClient : public WeightSyncClient {
 public:
  ZmqWeightSyncClient(std::string endpoint, std::chrono::milliseconds timeout,
                      std::optional<CurveKeys> curve = std::nullopt);

  void init_weight_transfer_engine(const nlohmann::json& init_info) override;
  void start_weight_update() override;
  void update_weights(const nlohmann::json& update_info) override;
  void finish_weight_update(const std::optional<std::string>& weight_version) override;
  WorkerDigests checkpoint_checksums() override;
  void start_adapter_update(const AdapterTarget& adapter) override;
  WorkerDigests adapter_checksums(const std::string& lora_name) override;
  void shutdown_weight_transfer_engine() override;
  void abort_and_shutdown_weight_transfer_engine() override;

  // Any other method of the worker (weight_checker, generate, health, ...).
  nlohmann::json call(std::string_view method,
                      const nlohmann::json& params = nlohmann::json::object()) const;

  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string endpoint_;
  std::chrono::milliseconds timeout_;
  std::optional<CurveKeys> curve_;
  std::shared_ptr<zmq::context_t> context_;
};

}  // namespace hotswap::trainer_sdk
