#include "trainer_sdk/trainer_weight_transfer_engine.hpp"

#include "protocol/errors.hpp"
#include "trainer_sdk/async_call.hpp"
#include "trainer_sdk/round_hook.hpp"
#include "transport/tensor_digest.hpp"

namespace hotswap::trainer_sdk {

WeightSyncClient::~WeightSyncClient() = default;

TrainerWeightTransferEngine::TrainerWeightTransferEngine(std::shared_ptr<WeightSyncClient> client,
                                                         std::shared_ptr<WeightSource> source,
                                                         bool is_sender)
    : client_(std::move(client)), source_(std::move(source)), is_sender_(is_sender) {
  if (!client_) throw protocol::ValueError("a trainer weight transfer engine needs a client");
}

TrainerWeightTransferEngine::~TrainerWeightTransferEngine() = default;

WeightSyncClient::WorkerDigests WeightSyncClient::checkpoint_checksums() {
  throw protocol::RuntimeError("this WeightSyncClient cannot fetch the workers' checksums");
}

void WeightSyncClient::start_adapter_update(const AdapterTarget& adapter) {
  throw protocol::RuntimeError("this WeightSyncClient cannot address a LoRA adapter ('" +
                               adapter.lora_name + "'): hotswap's ZeroMQ and fan-out clients can");
}

WeightSyncClient::WorkerDigests WeightSyncClient::adapter_checksums(const std::string& lora_name) {
  throw protocol::RuntimeError(
      "this WeightSyncClient cannot fetch the checksums of LoRA adapter '" + lora_name + "'");
}

void WeightSyncClient::shutdown_weight_transfer_engine() {
  throw protocol::RuntimeError("this WeightSyncClient cannot shut the workers' channel down");
}

void WeightSyncClient::abort_and_shutdown_weight_transfer_engine() {
  shutdown_weight_transfer_engine();
}

void TrainerWeightTransferEngine::push(const SendOptions& options) {
  round_version_ = options.weight_version;
  round_adapter_ = options.adapter;
  try {
    send_weights();
  } catch (...) {
    round_version_.reset();
    round_adapter_.reset();
    throw;
  }
  round_version_.reset();
  round_adapter_.reset();
  if (options.verify && sends_weights() && source() != nullptr) {
    verify_against_source(
        client(), *source(),
        options.adapter ? std::optional(options.adapter->lora_name) : std::nullopt);
  }
}

void TrainerWeightTransferEngine::run_round(const std::optional<std::string>& version,
                                            const Transfer& transfer) {
  if (round_adapter_) {
    client().start_adapter_update(*round_adapter_);
  } else {
    client().start_weight_update();
  }
  reach(RoundPoint::kStarted);
  mid_update_due_ = true;
  try {
    transfer();
  } catch (...) {
    mid_update_due_ = false;
    throw;
  }
  mid_update_due_ = false;
  reach(RoundPoint::kBeforeFinish);
  client().finish_weight_update(version);
}

void TrainerWeightTransferEngine::init_workers(const std::shared_ptr<WeightSyncClient>& client,
                                               const nlohmann::json& payload,
                                               std::chrono::milliseconds timeout) {
  AsyncCall handshake([client, payload] { client->init_weight_transfer_engine(payload); });
  reach(RoundPoint::kInit);
  handshake.wait(timeout, "init_weight_transfer_engine");
}

void TrainerWeightTransferEngine::update_in_place(const nlohmann::json& update_info,
                                                  std::chrono::milliseconds timeout) {
  auto shared_client = client_shared();
  AsyncCall update([shared_client, update_info] { shared_client->update_weights(update_info); });
  reach_mid_update();
  update.wait(timeout, "update_weights");
}

void TrainerWeightTransferEngine::reach_mid_update() {
  if (!mid_update_due_) return;
  mid_update_due_ = false;
  reach(RoundPoint::kMidUpdate);
}

void verify_against_source(WeightSyncClient& client, WeightSource& source,
                           const std::optional<std::string>& lora_name) {
  std::map<std::string, std::string> expected;
  auto stream = source.iter();
  while (auto item = stream->next()) {
    if (item->held()) expected[item->name] = transport::sha256_hex(item->tensor);
  }
  const auto workers =
      lora_name ? client.adapter_checksums(*lora_name) : client.checkpoint_checksums();
  for (const auto& [worker, served] : workers) {
    std::vector<std::string> wrong;
    for (const auto& [name, digest] : expected) {
      auto it = served.find(name);
      if (it == served.end() || it->second != digest) wrong.push_back(name);
    }
    if (wrong.empty()) continue;
    std::string list;
    for (std::size_t i = 0; i < wrong.size() && i < 8; ++i)
      list += (i ? ", " : "") + wrong[i];
    if (wrong.size() > 8) list += ", and " + std::to_string(wrong.size() - 8) + " more";
    throw protocol::TransferError("weight verification failed on " + worker + ": " +
                                  std::to_string(wrong.size()) +
                                  " tensors differ from the trainer's: " + list);
  }
}

void TrainerWeightTransferEngine::iterate_without_sending() const {
  auto stream = source_->iter();
  while (stream->next()) {
  }
}

}  // namespace hotswap::trainer_sdk
