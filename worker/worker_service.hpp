// WorkerService: wires a hotswap-worker's rooms together (the model and its tensor-parallel
// ranks, the weight session, the generation scheduler, the serving routes of worker/routes/, the
// weight checker) behind one route table that both the ZeroMQ control server and the HTTP
// server answer from (`answer(method, call)`). Method names are vLLM's route names, params vLLM's
// request bodies, results vLLM's response bodies (docs/architecture.md). Nothing below the
// frontends includes it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model_loader/servable_model.hpp"
#include "model_loader/tokenizer/tokenizer.hpp"
#include "worker/routes/completions/completion_service.hpp"
#include "worker/routes/route_table.hpp"
#include "worker/routes/serving_context.hpp"
#include "worker/serving/generation_scheduler.hpp"
#include "worker/serving/lora_registry.hpp"
#include "worker/serving/serving_metrics.hpp"
#include "worker/weight_checker.hpp"
#include "worker/weight_session.hpp"
#include "worker/weight_update_controller.hpp"
#include "worker/worker_options.hpp"

namespace hotswap::worker {

class TensorParallelGroup;
class TensorParallelModel;

class WorkerService {
 public:
  explicit WorkerService(const WorkerOptions& options);
  ~WorkerService();

  // Answers one call of `method` from its route (worker/routes/): a body now, or a run whose
  // answer comes later or streams. MethodNotFound for an unknown method; ValueError,
  // RuntimeError, TimeoutError, TransferError, OverloadedError as the work fails. Params are
  // checked before any work; a weight-transfer call runs in the weight session.
  RouteAnswer answer(std::string_view method, const RouteCall& call);
  // The same, waited for (a run that would stream is refused unless `call.may_stream`, which
  // this never sends): the answer's body as JSON. The call's `caller_gone`, if set, is asked now
  // and then during a long generation: true cancels it (the caller went away).
  nlohmann::json call(std::string_view method, const RouteCall& call);

  // Ends every generate request (finish_reason "abort") and refuses new ones: called once the
  // control loop stops, so that every caller hears back before the servers go.
  void stop_generation();

  bool shutdown_requested() const { return shutdown_requested_; }
  // One line for the start-up log: what was loaded and how.
  std::string describe() const;

  std::optional<std::string> weight_version() const { return controller_->weight_version(); }
  // vLLM's serving metrics in Prometheus text.
  std::string serving_metrics() const;

 private:
  // The routes of the control methods that are not serving routes: the weight session's calls,
  // pause and resume, the checker, health, metrics, LoRA adapters at run time, shutdown.
  void add_control_routes();
  // vLLM's guard on the runtime LoRA routes: a ValueError naming the variable unless it is set.
  void refuse_unless_runtime_lora_updating() const;
  nlohmann::json health() const;

  WorkerOptions options_;
  receiver::ParallelConfig parallel_;
  // tp > 1: the other rank processes; goes after everything that uses them.
  std::shared_ptr<TensorParallelGroup> tensor_parallel_;
  std::shared_ptr<model_loader::ServableModel> model_;
  std::shared_ptr<TensorParallelModel> sharded_;  // model_, when tp > 1
  // From the model directory's tokenizer.json, unless absent or --skip-tokenizer-init.
  std::optional<model_loader::Tokenizer> tokenizer_;
  std::unique_ptr<WeightUpdateController> controller_;
  // The LoRA adapters served (--enable-lora); before the scheduler, the completions and the
  // checker, which look them up.
  std::unique_ptr<LoraRegistry> loras_;
  // vLLM's guard on /v1/load_lora_adapter and /v1/unload_lora_adapter: the environment's
  // VLLM_ALLOW_RUNTIME_LORA_UPDATING, read at start-up.
  bool runtime_lora_updating_ = false;
  ServingMetrics metrics_;  // before the scheduler, which records into it
  std::unique_ptr<GenerationScheduler> scheduler_;
  std::unique_ptr<CompletionService> completions_;
  ChatTemplates chat_templates_;             // the model's, or --chat-template
  std::unique_ptr<ServingContext> serving_;  // what the serving routes reach
  std::unique_ptr<WeightChecker> checker_;
  // The weight-transfer calls; after the scheduler, whose generation it holds.
  std::unique_ptr<WeightSession> session_;
  RouteTable routes_;  // every control method's route, checked complete at construction
  std::string backend_;
  std::atomic<bool> shutdown_requested_{false};
};

}  // namespace hotswap::worker
