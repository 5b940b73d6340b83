#include "trainer_sdk/zmq_weight_sync_client.hpp"

#include "protocol/control_methods.hpp"

namespace hotswap::trainer_sdk {
namespace {

// weight_checker's digests, by tensor name.
std::map<std::string, std::string> checksums_of(const nlohmann::json& reply,
                                                const std::string& endpoint) {
  return reply_field_as<std::map<std::string, std::string>>(
      reply, endpoint, protocol::methods::kWeightChecker, "checksums",
      "an object of hex digests by tensor name");
}

}  // namespace

ZmqWeightSyncClient::ZmqWeightSyncClient(std::string endpoint, std::chrono::milliseconds timeout,
                                         std::optional<CurveKeys> curve)
    : endpoint_(std::move(endpoint)),
      timeout_(timeout),
      curve_(std::move(curve)),
      context_(std::make_shared<zmq::context_t>(1)) {}

nlohmann::json ZmqWeightSyncClient::call(std::string_view method,
                                         const nlohmann::json& params) const {
  RpcClient client(endpoint_, timeout_, curve_, context_);
  return client.call(method, params);
}

void ZmqWeightSyncClient::init_weight_transfer_engine(const nlohmann::json& init_info) {
  call(protocol::methods::kInitWeightTransferEngine, {{"init_info", init_info}});
}

void ZmqWeightSyncClient::start_weight_update() {
  call(protocol::methods::kStartWeightUpdate);
}

void ZmqWeightSyncClient::update_weights(const nlohmann::json& update_info) {
  call(protocol::methods::kUpdateWeights, {{"update_info", update_info}});
}

void ZmqWeightSyncClient::finish_weight_update(const std::optional<std::string>& weight_version) {
  nlohmann::json params = nlohmann::json::object();
  if (weight_version) params["weight_version"] = *weight_version;
  call(protocol::methods::kFinishWeightUpdate, params);
}

}  // namespace hotswap::trainer_sdk

namespace hotswap::trainer_sdk {

void ZmqWeightSyncClient::shutdown_weight_transfer_engine() {
  call(protocol::methods::kShutdownWeightTransferEngine);
}

void ZmqWeightSyncClient::abort_and_shutdown_weight_transfer_engine() {
  call(protocol::methods::kShutdownWeightTransferEngine, {{"abort_update", true}});
}

WeightSyncClient::WorkerDigests ZmqWeightSyncClient::checkpoint_checksums() {
  auto reply =
      call(protocol::methods::kWeightChecker, {{"action", "checksum"}, {"format", "checkpoint"}});
  return {{endpoint_, checksums_of(reply, endpoint_)}};
}

void ZmqWeightSyncClient::start_adapter_update(const AdapterTarget& adapter) {
  nlohmann::json params = {{"lora_name", adapter.lora_name}};
  if (!adapter.lora_config.is_null()) params["lora_config"] = adapter.lora_config;
  call(protocol::methods::kStartWeightUpdate, params);
}

WeightSyncClient::WorkerDigests ZmqWeightSyncClient::adapter_checksums(
    const std::string& lora_name) {
  auto reply = call(protocol::methods::kWeightChecker,
                    {{"action", "checksum"}, {"format", "checkpoint"}, {"lora_name", lora_name}});
  return {{endpoint_, checksums_of(reply, endpoint_)}};
}

}  // namespace hotswap::trainer_sdk
