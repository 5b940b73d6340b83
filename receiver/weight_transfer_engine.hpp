// WeightTransferEngine: the inference side of one backend, as vLLM's base class. It owns the
// weight-update lifecycle on the worker: init_transfer_engine once per trainer pairing, then per
// round start_weight_update, update_weights (one or more), finish_weight_update.
//
// The worker drives engines through the JSON face of this class. Backend authors derive from
// TypedWeightTransferEngine<InitInfo, UpdateInfo>, which parses and validates payloads into the
// typed protocol structs before any of their code runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "protocol/errors.hpp"
#include "receiver/engine_context.hpp"
#include "transport/device.hpp"

namespace hotswap::receiver {

class WeightTransferEngine {
 public:
  explicit WeightTransferEngine(EngineContext context);
  virtual ~WeightTransferEngine();
  WeightTransferEngine(const WeightTransferEngine&) = delete;
  WeightTransferEngine& operator=(const WeightTransferEngine&) = delete;

  // The engine's class name as vLLM spells it in messages, e.g. "NCCLWeightTransferEngine".
  virtual std::string_view name() const = 0;

  // Parses and validates `init_info` (a ValueError names what is wrong), records the wire
  // params it carries, and opens the data channel. Returns when the channel is ready.
  virtual void init_transfer_engine(const nlohmann::json& init_info) = 0;
  // Prepares a round: checkpoint-format engines start a layerwise reload here.
  virtual void start_weight_update() = 0;
  // Parses and validates the whole `update_info` before touching the data channel, receives,
  // loads, and (unless defers_processing()) synchronizes the device, so a return means the
  // bytes have landed.
  virtual void update_weights(const nlohmann::json& update_info) = 0;
  // Finalizes a round: checkpoint-format engines finish the layerwise reload here.
  virtual void finish_weight_update() = 0;
  virtual void shutdown() = 0;
  // Ends a session that failed part-way: drops what the round staged (the model's reload is
  // aborted, so in staged mode the live weights are untouched) and forgets the round's state,
  // so that the next start_weight_update is clean. Idempotent.
  virtual void abort_weight_update();

  // Whether start_draft_weight_update may retarget this engine at a draft model.
  virtual bool supports_draft_weight_update() const { return true; }
  // Whether update_weights returns before the weights are on the device; such an engine
  // completes in finish_weight_update, and drain_pending() blocks until it has.
  virtual bool defers_processing() const { return false; }
  // Idempotent; a no-op for engines that process synchronously.
  virtual void drain_pending() {}

  // Retargets the active update at another model (the speculative draft), and back.
  void set_weight_update_target(std::shared_ptr<model_loader::LoadableModel> model);
  void reset_weight_update_target();

  // Bytes of weights this engine has received since it was created (for /metrics).
  std::uint64_t bytes_received() const { return bytes_received_; }

  const EngineContext& context() const { return context_; }
  const c10::Device& device() const { return context_.device; }
  // The model the current update loads into.
  model_loader::LoadableModel& model() const;

 protected:
  void add_bytes_received(std::uint64_t bytes) { bytes_received_ += bytes; }

 private:
  std::atomic<std::uint64_t> bytes_received_{0};
  EngineContext context_;
  std::shared_ptr<model_loader::LoadableModel> target_;
};

template <class InitInfo, class UpdateInfo>
class TypedWeightTransferEngine : public WeightTransferEngine {
 public:
  using WeightTransferEngine::WeightTransferEngine;

  // The typed payloads. Any validation failure is a ValueError reading
  // "Invalid init_info for <Engine>: <what is wrong>", as vLLM's parse_init_info words it.
  InitInfo parse_init_info(const nlohmann::json& init_info) const {
    try {
      return InitInfo::from_json(init_info);
    } catch (const protocol::ValueError& e) {
      throw protocol::ValueError("Invalid init_info for " + std::string(name()) + ": " + e.what());
    }
  }
  UpdateInfo parse_update_info(const nlohmann::json& update_info) const {
    try {
      return UpdateInfo::from_json(update_info);
    } catch (const protocol::ValueError& e) {
      throw protocol::ValueError("Invalid update_info for " + std::string(name()) + ": " +
                                 e.what());
    }
  }

  // parse_init_info → init_transfer_channel, as update_weights is
  // parse_update_info → receive_weights → device sync. Both run with the engine's device
  // current (the calls come on pooled threads, whose current device is any earlier call's).
  void init_transfer_engine(const nlohmann::json& init_info) final {
    InitInfo typed = parse_init_info(init_info);
    transport::DeviceScope scope(device());
    init_transfer_channel(typed);
  }

  void update_weights(const nlohmann::json& update_info) final {
    UpdateInfo typed = parse_update_info(update_info);
    transport::DeviceScope scope(device());
    receive_weights(typed);
    if (!defers_processing()) transport::synchronize_device(device());
  }

 protected:
  // What a backend implements: the typed halves of the two JSON calls. init_transfer_channel
  // records the handshake's wire params on the engine (later rounds read them from there, never
  // from their own payloads) and opens the data channel.
  virtual void init_transfer_channel(const InitInfo& init_info) = 0;
  virtual void receive_weights(const UpdateInfo& update_info) = 0;
};

}  // namespace hotswap::receiver
