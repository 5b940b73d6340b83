#include "worker/worker_service.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
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
#include "worker/routes/serving_routes.hpp"
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
      options.timeout(), loras_.get());
  serving_ = std::make_unique<ServingContext>(ServingContext{
      .scheduler = *scheduler_,
      .completions = *completions_,
      .chat_templates = chat_templates_,
      .loras = *loras_,
      .config = model_->config(),
      .tokenizer = tokenizer_ ? &*tokenizer_ : nullptr,
      .no_tokenizer =
          options.skip_tokenizer_init
              ? "the worker was started with --skip-tokenizer-init: it serves token ids only"
              : "the model directory " + options.model +
                    " has no tokenizer.json: the worker serves token ids only",
      .model_root = options.model,
      .timeout = options.timeout(),
      .trust_request_chat_template = options.trust_request_chat_template});
  checker_ = std::make_unique<WeightChecker>(model_, parallel_, loras_.get());
  session_ =
      std::make_unique<WeightSession>(WeightSession::Parts{.controller = *controller_,
                                                           .scheduler = *scheduler_,
                                                           .loras = *loras_,
                                                           .model = model_,
                                                           .sharded = sharded_,
                                                           .peers = tensor_parallel_,
                                                           .update_mode = options.update_mode});
  add_serving_routes(routes_, *serving_);
  add_control_routes();
  // A method of protocol/control_methods.cpp without a route is a defect found at start-up, not
  // a MethodNotFound found by a user.
  routes_.check_complete();
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
  if (const auto* pool = model_->kv_pool()) {
    out << ", " << pool->budget() << ": " << pool->max_blocks() << " blocks of "
        << pool->block_size();
  }
  out << ", steps: " << model_->step_path();
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

namespace {

// libtorch's errors carry a backtrace; a client gets the one line that says why.
template <class Work>
auto with_one_line_errors(Work&& work) -> decltype(work()) {
  try {
    return work();
  } catch (const protocol::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw protocol::RuntimeError(transport::one_line_cause(e));
  }
}

}  // namespace

RouteAnswer WorkerService::answer(std::string_view method, const RouteCall& call) {
  return with_one_line_errors([&] {
    // Bad params are refused before any work: vLLM's routes answer these with a 400 and record
    // no metric.
    auto work = routes_.prepare(method, call);
    const protocol::ControlMethod& row = protocol::control_method(method);
    if (row.metric_operation.empty()) return work();
    // A weight-transfer call: one at a time per worker, counted for /metrics.
    RouteAnswer answer;
    session_->run(row, [&] { answer = work(); });
    return answer;
  });
}

json WorkerService::call(std::string_view method, const RouteCall& call) {
  RouteCall whole = call;
  whole.may_stream = false;
  return with_one_line_errors([&] {
    RouteAnswer answered = answer(method, whole);
    if (answered.pending) return json(answered.pending->wait(whole.caller_gone));
    return answered.json_body();
  });
}

void WorkerService::add_control_routes() {
  namespace m = protocol::methods;
  using Params = const json&;
  // Every control route answers at once, with JSON.
  auto add = [this](std::string_view method, std::function<json(Params params)> handler) {
    routes_.add(method, [handler = std::move(handler)](const RouteCall& call) {
      return RouteAnswer::now(handler(call.params));
    });
  };
  // The weight session's calls, answered with vLLM's message once they returned.
  auto session_call = [this](void (WeightSession::*call)(Params), const char* message) {
    return [this, call, message](Params params) -> json {
      ((*session_).*call)(params);
      return {{"message", message}};
    };
  };
  add(m::kInitWeightTransferEngine,
      session_call(&WeightSession::init_weight_transfer_engine, "Weight transfer initialized"));
  add(m::kShutdownWeightTransferEngine,
      session_call(&WeightSession::shutdown_weight_transfer_engine, "Weight transfer shut down"));
  add(m::kStartWeightUpdate,
      session_call(&WeightSession::start_weight_update, "Weight update started"));
  add(m::kStartDraftWeightUpdate, [this](Params) -> json {
    session_->start_draft_weight_update();
    return {{"message", "Draft weight update started"}};
  });
  add(m::kUpdateWeights, session_call(&WeightSession::update_weights, "Weights updated"));
  add(m::kFinishWeightUpdate,
      session_call(&WeightSession::finish_weight_update, "Weight update finished"));
  add(m::kUpdateWeightVersion, [this](Params params) -> json {
    auto version = protocol::new_version_of(params);
    controller_->update_weight_version(version);
    return {{"success", true}, {"new_version", version}};
  });
  add(m::kWeightInfo, [this](Params) -> json {
    auto v = controller_->weight_version();
    json info = {{"weight_version", v ? json(*v) : json(nullptr)}};
    // hotswap's addition with --enable-lora: each adapter served and its version.
    if (loras_->limits().enabled) {
      info["lora_versions"] = json::object();
      for (const auto& lora : loras_->list())
        info["lora_versions"][lora.name] = lora.version ? json(*lora.version) : json(nullptr);
    }
    return info;
  });
  add(m::kPause, [this](Params params) -> json {
    // clear_cache: hotswap keeps no prefix cache, so there is nothing to clear.
    auto pause = protocol::PauseParams::from_json(params);
    scheduler_->pause(pause_mode_from_name(pause.mode), options_.timeout());
    return {{"status", "paused"}};
  });
  add(m::kResume, [this](Params) -> json {
    scheduler_->resume();
    return {{"status", "resumed"}};
  });
  add(m::kAbortRequests, [this](Params params) -> json {
    auto request = protocol::AbortRequestsParams::from_json(params);
    return {{"status", "aborted"}, {"aborted", scheduler_->abort_requests(request.request_ids)}};
  });
  add(m::kIsPaused, [this](Params) -> json { return {{"is_paused", scheduler_->is_paused()}}; });
  add(m::kGetWorldSize, [this](Params params) -> json {
    bool include_dp = protocol::WorldSizeParams::from_json(params).include_dp;
    int size = parallel_.world_size() * (include_dp ? parallel_.data_parallel_size : 1);
    return {{"world_size", size}};
  });
  add(m::kWeightChecker, [this](Params params) { return checker_->handle(params); });
  add(m::kLoadLoraAdapter, [this](Params params) -> json {
    refuse_unless_runtime_lora_updating();
    auto request = protocol::LoadLoraAdapterParams::from_json(params);
    loras_->load({request.lora_name, request.lora_path, std::nullopt}, request.load_inplace);
    return {{"text", "Success: LoRA adapter '" + request.lora_name + "' added successfully."}};
  });
  add(m::kUnloadLoraAdapter, [this](Params params) -> json {
    refuse_unless_runtime_lora_updating();
    auto request = protocol::UnloadLoraAdapterParams::from_json(params);
    loras_->unload(request.lora_name);
    return {{"text", "Success: LoRA adapter '" + request.lora_name + "' removed successfully."}};
  });
  add(m::kHealth, [this](Params) { return health(); });
  add(m::kMetrics, [this](Params) -> json {
    return {
        {"text", render_weight_update_metrics(*session_, weight_version()) + serving_metrics()}};
  });
  add(m::kShutdown, [this](Params) -> json {
    shutdown_requested_ = true;
    return {{"status", "shutting down"}};
  });
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

void WorkerService::stop_generation() {
  scheduler_->shutdown();
}

}  // namespace hotswap::worker
