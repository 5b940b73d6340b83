// WorkerService: wires a hotswap-worker's rooms together (the model and its tensor-parallel
// ranks, the weight session, the generation scheduler, the OpenAI-compatible routes, the weight
// checker) behind one `call(method, params)` that both the ZeroMQ control server and the HTTP
// routes dispatch to. Method names are vLLM's route names, params vLLM's request bodies, results
// vLLM's response bodies (docs/architecture.md). Nothing below the frontends includes it.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <optional>

#include "model_loader/servable_model.hpp"
#include "model_loader/tokenizer/tokenizer.hpp"
#include "worker/serving/completion_service.hpp"
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

  // Runs one method. MethodNotFound for an unknown one; ValueError, RuntimeError,
  // TimeoutError, TransferError, OverloadedError as the work fails. `caller_gone`, if given, is
  // asked now and then during a long generate: true cancels it (the caller went away).
  nlohmann::json call(const std::string& method, const nlohmann::json& params,
                      const std::function<bool()>& caller_gone = {});

  // `generate` without holding a thread while it runs: `done` gets the result or the error, once,
  // from another thread, unless this throws first (bad params, dirty model, full queue). The
  // request is dropped with a TimeoutError after --timeout. Returns a ticket for cancel_generate.
  using GenerateDone = std::function<void(nlohmann::json result, std::exception_ptr error)>;
  std::uint64_t generate_async(const nlohmann::json& params, GenerateDone done);
  // The caller of `ticket` went away: stop generating for it (a generate's ticket, or a
  // completion's first_ticket()).
  void cancel_generate(std::uint64_t ticket);
  // Ends every generate request (finish_reason "abort") and refuses new ones: called once the
  // control loop stops, so that every caller hears back before the servers go.
  void stop_generation();

  // POST /v1/completions: starts the run the HTTP route streams or waits for (throws on bad
  // input before anything runs).
  std::shared_ptr<CompletionRun> start_completion(const nlohmann::json& params,
                                                  const std::function<bool()>& caller_gone = {});
  // The same, for callers that answer it whole (ZeroMQ): `stream: true` is a ValueError.
  std::shared_ptr<CompletionRun> start_whole_completion(const nlohmann::json& params);
  // POST /v1/chat/completions: the conversation rendered by the model's chat template, then as
  // start_completion. `params` as the client ordered its keys.
  std::shared_ptr<CompletionRun> start_chat_completion(
      const nlohmann::ordered_json& params, const std::function<bool()>& caller_gone = {});
  // The same, answered whole (ZeroMQ): `stream: true` is a ValueError.
  std::shared_ptr<CompletionRun> start_whole_chat_completion(const nlohmann::ordered_json& params);
  // A method whose params keep the client's key order (ControlMethod::keeps_key_order: chat
  // completions, tokenize with messages); any other method as call().
  nlohmann::json call_ordered(const std::string& method, const nlohmann::ordered_json& params,
                              const std::function<bool()>& caller_gone = {});
  // GET /v1/models.
  nlohmann::ordered_json models() const { return completions_->models(); }

  bool shutdown_requested() const { return shutdown_requested_; }
  // One line for the start-up log: what was loaded and how.
  std::string describe() const;

  std::optional<std::string> weight_version() const { return controller_->weight_version(); }
  // vLLM's serving metrics in Prometheus text.
  std::string serving_metrics() const;

 private:
  using CallerGone = std::function<bool()>;
  using Handler =
      std::function<nlohmann::json(const nlohmann::json& params, const CallerGone& caller_gone)>;
  // One handler per method of protocol::control_methods(), checked at construction.
  void bind_handlers();
  // vLLM's guard on the runtime LoRA routes: a ValueError naming the variable unless it is set.
  void refuse_unless_runtime_lora_updating() const;
  nlohmann::json dispatch(const std::string& name, const nlohmann::json& params,
                          const CallerGone& caller_gone);
  nlohmann::json generate(const nlohmann::json& params, const std::function<bool()>& caller_gone);
  nlohmann::json health() const;
  // The model's tokenizer (tokenize, detokenize); RuntimeError when the worker has none.
  const model_loader::Tokenizer& tokenizer() const;

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
  // /tokenize's answer for `text` (a prompt, or a rendered conversation).
  nlohmann::json tokenize_text(const std::string& text, bool add_special_tokens,
                               bool return_token_strs, const std::function<bool()>& caller_gone);

  std::unique_ptr<CompletionService> completions_;
  ChatTemplates chat_templates_;  // the model's, or --chat-template
  std::unique_ptr<WeightChecker> checker_;
  // The weight-transfer calls; after the scheduler, whose generation it holds.
  std::unique_ptr<WeightSession> session_;
  std::map<std::string_view, Handler> handlers_;
  std::string backend_;
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<std::uint64_t> generate_ids_{0};  // for generate requests that name no id
};

}  // namespace hotswap::worker
