#include "worker/worker_service.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "model_loader/intra_op_team.hpp"
#include "protocol/control_methods.hpp"
#include "protocol/errors.hpp"
#include "protocol/method_params.hpp"
#include "protocol/weight_transfer_config.hpp"
#include "receiver/weight_transfer_engine_factory.hpp"
#include "transport/device.hpp"
#include "transport/exception_text.hpp"
#include "worker/device_plan.hpp"
#include "worker/parallel/tensor_parallel_model.hpp"
#include "worker/weight_update_metrics.hpp"

namespace hotswap::worker {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// vLLM's reading of a boolean environment variable: "1" or "true", in any case.
bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return false;
  std::string text(value);
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  text.erase(text.begin(), std::find_if_not(text.begin(), text.end(), space));
  text.erase(std::find_if_not(text.rbegin(), text.rend(), space).base(), text.end());
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text == "1" || text == "true";
}

}  // namespace

void WorkerService::refuse_unless_runtime_lora_updating() const {
  if (!runtime_lora_updating_) {
    throw protocol::ValueError(
        "loading and unloading LoRA adapters at run time is off: start the worker with "
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its environment (vLLM's guard on these "
        "routes), or name adapters with --lora-modules");
  }
}

WorkerService::WorkerService(const WorkerOptions& options) : options_(options) {
  parallel_.data_parallel_rank = options.data_parallel_rank;
  parallel_.data_parallel_size = options.data_parallel_size;
  parallel_.tensor_parallel_size = options.tensor_parallel_size;
  // The model the scheduler and the checker see, and this rank's shard of it, which the
  // receive engine loads into (the same model at tp = 1).
  std::shared_ptr<model_loader::ServableModel> shard;
  std::shared_ptr<TensorParallelModel> sharded;
  if (options.tensor_parallel_size > 1) {
    // The flags' checks (devices for every rank among them) before any rank process starts.
    auto shard_options = model_options_for(options);
    tensor_parallel_ = std::make_shared<TensorParallelGroup>(options);
    shard_options.tensor_parallel_group = tensor_parallel_->communicator();
    shard = model_loader::load_model(options.model, shard_options);
    tensor_parallel_->wait_until_ready();
    model_ = sharded_ = sharded = std::make_shared<TensorParallelModel>(shard, tensor_parallel_);
  } else {
    model_ = shard = model_loader::load_model(options.model, model_options_for(options));
  }
  // The load ran parallel copies on this thread: its team goes, so that only the scheduler's
  // thread keeps one (intra_op_team.hpp).
  model_loader::release_intra_op_team();
  const auto tokenizer_file = std::filesystem::path(options.model) / "tokenizer.json";
  if (!options.skip_tokenizer_init && std::filesystem::exists(tokenizer_file)) {
    try {
      tokenizer_ = model_loader::Tokenizer::from_file(tokenizer_file);
    } catch (const protocol::ValueError& e) {
      throw protocol::ValueError(std::string(e.what()) +
                                 " (--skip-tokenizer-init serves token ids without it)");
    }
    if (tokenizer_->vocab_size() > model_->config().vocab_size) {
      throw protocol::ValueError("tokenizer " + tokenizer_file.string() + " has ids up to " +
                                 std::to_string(tokenizer_->vocab_size() - 1) +
                                 " but the model's vocab_size is " +
                                 std::to_string(model_->config().vocab_size));
    }
  }

  chat_templates_ = ChatTemplates::load(options.model, options.chat_template);

  std::unique_ptr<receiver::WeightTransferEngine> engine;
  if (options.weight_transfer_config) {
    auto config = protocol::WeightTransferConfig::from_json(*options.weight_transfer_config);
    backend_ = config.backend;
    engine = receiver::WeightTransferEngineFactory::create_engine(
        receiver::EngineContext{config, parallel_, shard->device(), shard, options.timeout()});
  }
  controller_ = std::make_unique<WeightUpdateController>(std::move(engine), parallel_);
  if (sharded) {
    controller_->set_tensor_parallel_peers(
        tensor_parallel_,
        [sharded](const std::function<void()>& fn) { sharded->between_steps(fn); });
  }
  const std::string served_name =
      options.served_model_name.empty() ? options.model : options.served_model_name;
  loras_ = std::make_unique<LoraRegistry>(
      *model_, LoraLimits{options.enable_lora, options.max_loras, options.max_lora_rank},
      served_name);
  for (const auto& entry : options.lora_modules)
    loras_->load(LoraModule::parse(entry));
  runtime_lora_updating_ = env_flag("VLLM_ALLOW_RUNTIME_LORA_UPDATING");
  scheduler_ = std::make_unique<GenerationScheduler>(
      model_, [this] { return controller_->weight_version(); },
      SchedulerLimits{options.max_num_seqs, options.max_num_batched_tokens,
                      options.max_queued_requests},
      &metrics_, loras_.get());
  completions_ = std::make_unique<CompletionService>(
      *scheduler_, tokenizer_ ? &*tokenizer_ : nullptr, model_->config(), served_name,
      options.model, options.timeout(), loras_.get());
  checker_ = std::make_unique<WeightChecker>(model_, parallel_, loras_.get());
  session_ =
      std::make_unique<WeightSession>(WeightSession::Parts{.controller = *controller_,
                                                           .scheduler = *scheduler_,
                                                           .loras = *loras_,
                                                           .model = model_,
                                                           .sharded = sharded_,
                                                           .peers = tensor_parallel_,
                                                           .update_mode = options.update_mode});
  bind_handlers();
}

WorkerService::~WorkerService() {
  session_.reset();    // lets go of its hold on generation while the scheduler is there
  scheduler_.reset();  // aborts generation before the model goes
  completions_.reset();
  controller_.reset();
}

std::string WorkerService::describe() const {
  std::ostringstream out;
  const auto& c = model_->config();
  out << c.architecture_name() << " from " << options_.model << " (" << c.num_hidden_layers
      << " layers, " << model_->runtime_bytes() / 1e6 << " MB " << c10::toString(model_->dtype())
      << (options_.quantization.empty() ? "" : " int8") << ") on " << options_.device
      << ", backend " << (backend_.empty() ? std::string("none") : backend_) << ", update mode "
      << (options_.update_mode == model_loader::UpdateMode::kStaged ? "staged" : "inplace")
      << ", data-parallel rank " << parallel_.data_parallel_rank << "/"
      << parallel_.data_parallel_size << ", tensor-parallel size " << parallel_.tensor_parallel_size
      << (options_.enable_expert_parallel && parallel_.tensor_parallel_size > 1
              ? " (experts spread over the ranks)"
              : "");
  return out.str();
}

json WorkerService::health() const {
  const std::string current_call = session_->current_call();
  bool dirty = model_->is_dirty();
  auto version = controller_->weight_version();
  // A tensor-parallel rank that died fails the whole worker: it says which, until restarted.
  std::optional<std::string> failure;
  if (tensor_parallel_) failure = tensor_parallel_->failure();
  return {{"status", failure ? "failed"
                     : dirty ? "dirty"
                             : "ok"},
          {"error", failure ? json(*failure) : json(nullptr)},
          {"tensor_parallel_size", parallel_.tensor_parallel_size},
          {"dirty", dirty},
          {"model", std::string(model_->config().architecture_name())},
          {"backend", backend_.empty() ? json(nullptr) : json(backend_)},
          {"update_mode",
           options_.update_mode == model_loader::UpdateMode::kStaged ? "staged" : "inplace"},
          {"weight_update_active", controller_->session_active()},
          {"weight_call", current_call.empty() ? json(nullptr) : json(current_call)},
          {"is_paused", scheduler_->is_paused()},
          {"requests_in_flight", scheduler_->in_flight()},
          {"weight_version", version ? json(*version) : json(nullptr)},
          {"data_parallel_rank", parallel_.data_parallel_rank}};
}

json WorkerService::call(const std::string& method, const json& params,
                         const std::function<bool()>& caller_gone) {
  try {
    return dispatch(method, params, caller_gone);
  } catch (const protocol::Error&) {
    throw;
  } catch (const std::exception& e) {
    // libtorch's errors carry a backtrace; a client gets the one line that says why.
    throw protocol::RuntimeError(transport::one_line_cause(e));
  }
}

void WorkerService::bind_handlers() {
  namespace m = protocol::methods;
  using Params = const json&;
  using Gone = const CallerGone&;
  // The weight session's calls, answered with vLLM's message once they returned.
  auto session_call = [this](void (WeightSession::*call)(Params), const char* message) {
    return [this, call, message](Params params, Gone) -> json {
      ((*session_).*call)(params);
      return {{"message", message}};
    };
  };
  handlers_ = {
      {m::kInitWeightTransferEngine,
       session_call(&WeightSession::init_weight_transfer_engine, "Weight transfer initialized")},
      {m::kShutdownWeightTransferEngine,
       session_call(&WeightSession::shutdown_weight_transfer_engine, "Weight transfer shut down")},
      {m::kStartWeightUpdate,
       session_call(&WeightSession::start_weight_update, "Weight update started")},
      {m::kStartDraftWeightUpdate,
       [this](Params, Gone) -> json {
         session_->start_draft_weight_update();
         return {{"message", "Draft weight update started"}};
       }},
      {m::kUpdateWeights, session_call(&WeightSession::update_weights, "Weights updated")},
      {m::kFinishWeightUpdate,
       session_call(&WeightSession::finish_weight_update, "Weight update finished")},
      {m::kUpdateWeightVersion,
       [this](Params params, Gone) -> json {
         auto version = protocol::new_version_of(params);
         controller_->update_weight_version(version);
         return {{"success", true}, {"new_version", version}};
       }},
      {m::kWeightInfo,
       [this](Params, Gone) -> json {
         auto v = controller_->weight_version();
         json info = {{"weight_version", v ? json(*v) : json(nullptr)}};
         // hotswap's addition with --enable-lora: each adapter served and its version.
         if (loras_->limits().enabled) {
           info["lora_versions"] = json::object();
           for (const auto& lora : loras_->list())
             info["lora_versions"][lora.name] = lora.version ? json(*lora.version) : json(nullptr);
         }
         return info;
       }},
      {m::kPause,
       [this](Params params, Gone) -> json {
         // clear_cache: hotswap keeps no prefix cache, so there is nothing to clear.
         auto pause = protocol::PauseParams::from_json(params);
         scheduler_->pause(pause_mode_from_name(pause.mode), options_.timeout());
         return {{"status", "paused"}};
       }},
      {m::kResume,
       [this](Params, Gone) -> json {
         scheduler_->resume();
         return {{"status", "resumed"}};
       }},
      {m::kAbortRequests,
       [this](Params params, Gone) -> json {
         auto request = protocol::AbortRequestsParams::from_json(params);
         return {{"status", "aborted"},
                 {"aborted", scheduler_->abort_requests(request.request_ids)}};
       }},
      {m::kIsPaused,
       [this](Params, Gone) -> json {
         return {{"is_paused", scheduler_->is_paused()}};
       }},
      {m::kGetWorldSize,
       [this](Params params, Gone) -> json {
         bool include_dp = protocol::WorldSizeParams::from_json(params).include_dp;
         int size = parallel_.world_size() * (include_dp ? parallel_.data_parallel_size : 1);
         return {{"world_size", size}};
       }},
      {m::kWeightChecker, [this](Params params, Gone) { return checker_->handle(params); }},
      {m::kGenerate,
       [this](Params params, Gone caller_gone) { return generate(params, caller_gone); }},
      {m::kTokenize,
       [this](Params params, Gone caller_gone) -> json {
         // Reached without the client's key order (call()): a conversation's is lost.
         if (params.contains("messages")) {
           return call_ordered(std::string(m::kTokenize), nlohmann::ordered_json(params),
                               caller_gone);
         }
         auto request = protocol::TokenizeParams::from_json(params);
         return tokenize_text(request.prompt, request.add_special_tokens, request.return_token_strs,
                              caller_gone);
       }},
      {m::kChatCompletions,
       [this](Params params, Gone caller_gone) -> json {
         return json(
             start_whole_chat_completion(nlohmann::ordered_json(params))->wait(caller_gone));
       }},
      {m::kDetokenize,
       [this](Params params, Gone) -> json {
         auto request = protocol::DetokenizeParams::from_json(params);
         return {{"prompt", tokenizer().decode(request.tokens)}};
       }},
      {m::kCompletions,
       [this](Params params, Gone caller_gone) -> json {
         return json(start_whole_completion(params)->wait(caller_gone));
       }},
      {m::kModels, [this](Params, Gone) { return json(completions_->models()); }},
      {m::kLoadLoraAdapter,
       [this](Params params, Gone) -> json {
         refuse_unless_runtime_lora_updating();
         auto request = protocol::LoadLoraAdapterParams::from_json(params);
         loras_->load({request.lora_name, request.lora_path, std::nullopt}, request.load_inplace);
         return {{"text", "Success: LoRA adapter '" + request.lora_name + "' added successfully."}};
       }},
      {m::kUnloadLoraAdapter,
       [this](Params params, Gone) -> json {
         refuse_unless_runtime_lora_updating();
         auto request = protocol::UnloadLoraAdapterParams::from_json(params);
         loras_->unload(request.lora_name);
         return {
             {"text", "Success: LoRA adapter '" + request.lora_name + "' removed successfully."}};
       }},
      {m::kHealth, [this](Params, Gone) { return health(); }},
      {m::kMetrics,
       [this](Params, Gone) -> json {
         return {{"text",
                  render_weight_update_metrics(*session_, weight_version()) + serving_metrics()}};
       }},
      {m::kShutdown,
       [this](Params, Gone) -> json {
         shutdown_requested_ = true;
         return {{"status", "shutting down"}};
       }},
  };
  // The table and the handlers must name the same methods: a method added to one only is a
  // defect found at start-up, not a MethodNotFound found by a user.
  for (const auto& method : protocol::control_methods()) {
    if (!handlers_.contains(method.name)) {
      throw std::logic_error("control method '" + std::string(method.name) + "' has no handler");
    }
  }
  if (handlers_.size() != protocol::control_methods().size()) {
    throw std::logic_error("a handler is bound to a method protocol/control_methods.cpp lacks");
  }
}

json WorkerService::dispatch(const std::string& name, const json& params,
                             const CallerGone& caller_gone) {
  // Rejections of a malformed request body come before any work: vLLM's routes answer these
  // with a 400 and record no metric.
  protocol::validate_params(name, params);
  const protocol::ControlMethod& method = protocol::control_method(name);
  const Handler& handler = handlers_.at(method.name);
  if (method.metric_operation.empty()) return handler(params, caller_gone);
  // A weight-transfer call: one at a time per worker, counted for /metrics.
  return session_->run(method, [&] { return handler(params, caller_gone); });
}

std::uint64_t WorkerService::generate_async(const json& params, GenerateDone done) {
  auto p = protocol::GenerateParams::from_json(params);
  fit_to_context(model_->config().max_position_embeddings,
                 static_cast<std::int64_t>(p.prompt_token_ids.size()), p.max_tokens);
  GenerateRequest request;
  request.prompt_token_ids = std::move(p.prompt_token_ids);
  static_cast<protocol::SamplingFields&>(request.params) = p;  // as read and validated
  request.params.max_tokens = p.max_tokens;
  request.params.stop_token_ids = std::move(p.stop_token_ids);
  request.logprobs = p.logprobs;
  // Named by its own id, or one made up: abort_requests with no ids ends it too.
  request.request_id = p.request_id.value_or("generate-" + std::to_string(++generate_ids_));
  // A LoRA adapter by its name, as completions take one (a 404 for a name not served).
  request.lora = completions_->resolve_model(p.model);
  if (request.lora != nullptr) request.lora_name = *p.model;
  const bool logprobs = p.logprobs, versions = p.return_weight_versions;
  // A worker paused in keep mode holds requests until resume(); the wait is bounded all the same.
  return scheduler_->submit(std::move(request), Clock::now() + options_.timeout(),
                            [logprobs, versions, done = std::move(done)](GenerateOutcome outcome) {
                              if (outcome.error) {
                                done(nullptr, outcome.error);
                              } else {
                                done(outcome.result->to_json(logprobs, versions), nullptr);
                              }
                            });
}

std::shared_ptr<CompletionRun> WorkerService::start_completion(
    const json& params, const std::function<bool()>& caller_gone) {
  return completions_->start(params, caller_gone);
}

std::shared_ptr<CompletionRun> WorkerService::start_chat_completion(
    const nlohmann::ordered_json& params, const std::function<bool()>& caller_gone) {
  return completions_->start_chat(protocol::ChatCompletionParams::from_json(params),
                                  chat_templates_, options_.trust_request_chat_template,
                                  caller_gone);
}

std::shared_ptr<CompletionRun> WorkerService::start_whole_chat_completion(
    const nlohmann::ordered_json& params) {
  if (params.is_object() && params.contains("stream") && params["stream"] == true) {
    throw protocol::ValueError(
        "`stream: true` is served on the HTTP route /v1/chat/completions (server-sent events); "
        "over ZeroMQ a chat completion comes back whole");
  }
  return start_chat_completion(params);
}

json WorkerService::call_ordered(const std::string& method, const nlohmann::ordered_json& params,
                                 const std::function<bool()>& caller_gone) {
  namespace m = protocol::methods;
  const bool chat = method == m::kChatCompletions;
  const bool chat_tokenize =
      method == m::kTokenize && params.is_object() && params.contains("messages");
  if (!chat && !chat_tokenize) return call(method, json(params), caller_gone);
  try {
    if (chat) return json(start_whole_chat_completion(params)->wait(caller_gone));
    // vLLM's TokenizeChatRequest: the conversation as the chat route renders it.
    auto request = protocol::TokenizeChatParams::from_json(params);
    refuse_untrusted_template(request.conversation, options_.trust_request_chat_template);
    return tokenize_text(chat_templates_.render(request.conversation), request.add_special_tokens,
                         request.return_token_strs, caller_gone);
  } catch (const protocol::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw protocol::RuntimeError(transport::one_line_cause(e));
  }
}

json WorkerService::tokenize_text(const std::string& text, bool add_special_tokens,
                                  bool return_token_strs,
                                  const std::function<bool()>& caller_gone) {
  // vLLM's TokenizeResponse. No context limit, as vLLM's; a client that leaves (or a worker that
  // stops) ends the work.
  const auto ids = *tokenizer().encode_within(text, add_special_tokens,
                                              std::numeric_limits<std::size_t>::max(), caller_gone);
  json strs = nullptr;
  if (return_token_strs) {
    strs = json::array();
    for (auto id : ids)
      strs.push_back(*tokenizer().id_to_token(id));
  }
  return {{"count", ids.size()},
          {"max_model_len", model_->config().max_position_embeddings},
          {"tokens", ids},
          {"token_strs", strs}};
}

std::shared_ptr<CompletionRun> WorkerService::start_whole_completion(const json& params) {
  if (params.is_object() && params.contains("stream") && params["stream"] == true) {
    throw protocol::ValueError(
        "`stream: true` is served on the HTTP route /v1/completions (server-sent events); over "
        "ZeroMQ a completion comes back whole");
  }
  return start_completion(params);
}

std::string WorkerService::serving_metrics() const {
  std::string out =
      metrics_.render(completions_->model_name(), scheduler_->running(), scheduler_->waiting());
  if (loras_->limits().enabled) {
    const auto names = scheduler_->lora_names();
    out += render_lora_requests_info(loras_->limits().max_loras, names.waiting, names.running);
  }
  return out;
}

void WorkerService::cancel_generate(std::uint64_t ticket) {
  if (!completions_->cancel(ticket)) scheduler_->cancel(ticket);
}

void WorkerService::stop_generation() {
  scheduler_->shutdown();
}

const model_loader::Tokenizer& WorkerService::tokenizer() const {
  if (!tokenizer_) {
    throw protocol::RuntimeError(
        options_.skip_tokenizer_init
            ? "the worker was started with --skip-tokenizer-init: it serves token ids only"
            : "the model directory " + options_.model +
                  " has no tokenizer.json: the worker serves token ids only");
  }
  return *tokenizer_;
}

json WorkerService::generate(const json& params, const std::function<bool()>& caller_gone) {
  auto promise = std::make_shared<std::promise<json>>();
  auto future = promise->get_future();
  const auto ticket = generate_async(params, [promise](json result, std::exception_ptr error) {
    if (error) {
      promise->set_exception(error);
    } else {
      promise->set_value(std::move(result));
    }
  });
  // The scheduler enforces the deadline; the caller may leave earlier.
  while (future.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (caller_gone && caller_gone()) scheduler_->cancel(ticket);
  }
  return future.get();
}

}  // namespace hotswap::worker
