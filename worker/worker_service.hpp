// WorkerService: everything a hotswap-worker does, behind one `call(method, params)` that both
// the ZeroMQ control server and the HTTP routes dispatch to. Method names are vLLM's route
// names, params vLLM's request bodies, results vLLM's response bodies (architecture page).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "model_loader/llama_model.hpp"
#include "worker/generation_scheduler.hpp"
#include "worker/weight_checker.hpp"
#include "worker/weight_update_controller.hpp"
#include "worker/worker_options.hpp"

namespace hotswap::worker {

class WorkerService {
 public:
  explicit WorkerService(const WorkerOptions& options);
  ~WorkerService();

  // Runs one method. MethodNotFound for an unknown one; ValueError, RuntimeError,
  // TimeoutError, TransferError as the work fails.
  nlohmann::json call(const std::string& method, const nlohmann::json& params);

  // Methods that may take long (a transfer, generation, hashing, a drain) and so run off the
  // socket thread; the others answer at once.
  static bool is_long(const std::string& method);
  bool shutdown_requested() const { return shutdown_requested_; }
  // One line for the start-up log: what was loaded and how.
  std::string describe() const;

  // Counters for /metrics.
  struct OperationStats {
    std::uint64_t success = 0, error = 0, in_flight = 0;
    double seconds = 0;
  };
  std::map<std::string, OperationStats> operation_stats() const;
  std::optional<std::string> weight_version() const { return controller_->weight_version(); }
  std::uint64_t bytes_received() const { return controller_->bytes_received(); }

 private:
  nlohmann::json weight_call(const std::string& method, const nlohmann::json& params);
  nlohmann::json generate(const nlohmann::json& params);
  nlohmann::json health() const;

  WorkerOptions options_;
  receiver::ParallelConfig parallel_;
  std::shared_ptr<model_loader::LlamaModel> model_;
  std::unique_ptr<WeightUpdateController> controller_;
  std::unique_ptr<GenerationScheduler> scheduler_;
  std::unique_ptr<WeightChecker> checker_;
  std::string backend_;
  std::timed_mutex weight_ops_;  // one weight-transfer call at a time per worker
  bool update_hold_ = false;     // inplace: generation held during a session
  std::atomic<bool> shutdown_requested_{false};
  mutable std::mutex stats_mutex_;
  std::map<std::string, OperationStats> stats_;
};

}  // namespace hotswap::worker
