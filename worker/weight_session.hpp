// WeightSession: the worker's weight-transfer calls, apart from serving. It runs them one at a
// time, names the one running for `health`, counts each for /metrics (vLLM 0.34's duration
// histogram), holds generation while the weights it reads are being written (in place, the whole
// session; staged, the commit), and serves a LoRA adapter's round under its name once every rank
// finished it whole. The receive itself is the WeightUpdateController's.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "model_loader/servable_model.hpp"
#include "protocol/control_methods.hpp"
#include "worker/serving/generation_hold.hpp"
#include "worker/serving/lora_registry.hpp"
#include "worker/weight_update_controller.hpp"

namespace hotswap::worker {

class TensorParallelGroup;
class TensorParallelModel;

class WeightSession {
 public:
  // vLLM 0.34's duration histogram buckets, in seconds (upper bounds; +Inf is implied).
  static constexpr std::array<double, 9> kDurationBuckets{0.01, 0.1, 1, 10, 30, 60, 120, 300, 600};
  struct OperationStats {
    std::uint64_t success = 0, error = 0, in_flight = 0;
    double seconds = 0;
    // Calls whose duration was at most kDurationBuckets[i] (not cumulative: render sums them).
    std::array<std::uint64_t, kDurationBuckets.size()> within{};
  };

  // What the session works on; every reference outlives it. `sharded` and `peers` are set with
  // tensor parallelism (rank 0's view of the model, and the other rank processes).
  struct Parts {
    WeightUpdateController& controller;
    GenerationScheduler& scheduler;
    LoraRegistry& loras;
    std::shared_ptr<model_loader::ServableModel> model;
    std::shared_ptr<TensorParallelModel> sharded;
    std::shared_ptr<TensorParallelGroup> peers;
    model_loader::UpdateMode update_mode = model_loader::UpdateMode::kStaged;
  };
  explicit WeightSession(Parts parts);
  // Goes before the scheduler: a hold still taken (a session open at shutdown) is released.
  ~WeightSession();
  WeightSession(const WeightSession&) = delete;
  WeightSession& operator=(const WeightSession&) = delete;

  // Runs `call`, the handler of the weight-transfer method `method` (one with a
  // metric_operation), under the one-at-a-time lock: named in health while it runs, counted for
  // /metrics however it ends. A second call while one runs is a RuntimeError.
  void run(const protocol::ControlMethod& method, const std::function<void()>& call);

  // The four calls and their neighbours, params as the control method's (already validated).
  void init_weight_transfer_engine(const nlohmann::json& params);
  void shutdown_weight_transfer_engine(const nlohmann::json& params);
  // The model's round, or with hotswap's `lora_name` an adapter's (docs/worker.md).
  void start_weight_update(const nlohmann::json& params);
  void start_draft_weight_update();
  void update_weights(const nlohmann::json& params);
  void finish_weight_update(const nlohmann::json& params);

  // The weight-transfer call running now (empty when none), for health.
  std::string current_call() const;
  std::map<std::string, OperationStats> operation_stats() const;
  // Bytes of weights each rank has received, rank 0 first (one element at tp = 1).
  std::vector<std::uint64_t> bytes_received_by_rank() const;

 private:
  struct PendingAdapter;
  // What start_weight_update's round loads into: the model (a null staging), or, with hotswap's
  // `lora_name`, a staging of that adapter, served under its name when the round finishes whole
  // (replacing the adapter served under it, at its config, or a new one of `lora_config`); with
  // tensor parallelism, what the other ranks need to stage their shards of it (`peer_params`).
  struct AdapterRound {
    std::shared_ptr<model_loader::LoadableModel> staging;
    nlohmann::json peer_params = nlohmann::json::object();
    std::shared_ptr<PendingAdapter> pending;  // what the staging built, until it is served
  };
  AdapterRound adapter_round(const nlohmann::json& params);
  // After every rank's finish returned: serves the adapter the round built, under its name, at
  // `version` (nothing for a model's round, or one that built nothing).
  void serve_adapter_round(const std::optional<std::string>& version);
  // Called as every call of a session returns or throws: once the session is over (finished,
  // failed, shut down), the in-place hold on generation goes, and so does an adapter never
  // served.
  void let_go_if_ended();
  struct LetGoIfEnded;
  void start_session(const nlohmann::json& params, const std::function<void()>& begin);

  Parts parts_;
  std::timed_mutex one_call_at_a_time_;
  // In place, generation reads no weight while a session writes them: held from the start of a
  // model's round to its end.
  std::optional<GenerationHold> session_hold_;
  // The adapter's round in progress, if the session is one.
  std::shared_ptr<PendingAdapter> pending_adapter_;
  mutable std::mutex stats_mutex_;
  std::map<std::string, OperationStats> stats_;
  std::string current_call_;  // guarded by stats_mutex_
};

}  // namespace hotswap::worker
