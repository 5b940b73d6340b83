#include "worker/worker_service.hpp"

#include <chrono>
#include <sstream>

#include "protocol/errors.hpp"
#include "protocol/weight_transfer_config.hpp"
#include "receiver/weight_transfer_engine_factory.hpp"

namespace hotswap::worker {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// vLLM's metric names for each weight operation.
const std::map<std::string, std::string> kOperationNames = {
    {"init_weight_transfer_engine", "init"},
    {"shutdown_weight_transfer_engine", "shutdown"},
    {"start_weight_update", "start"},
    {"start_draft_weight_update", "start_draft"},
    {"update_weights", "update"},
    {"finish_weight_update", "finish"},
    {"update_weight_version", "set_version"},
};

model_loader::ModelOptions model_options(const WorkerOptions& o) {
  model_loader::ModelOptions m;
  if (!o.dtype.empty()) m.dtype = protocol::dtype_from_name(o.dtype);
  if (!o.quantization.empty()) {
    if (o.quantization != "int8") {
      throw protocol::ValueError("unknown --quantization '" + o.quantization + "' (int8 is known)");
    }
    m.quantize_int8 = true;
  }
  m.update_mode = o.update_mode;
  m.device = c10::Device(o.device);
  return m;
}

const json& required_object(const json& params, const char* key) {
  auto it = params.find(key);
  if (it == params.end()) {
    throw protocol::ValueError(std::string("Missing '") + key + "' in request body");
  }
  return *it;
}

std::optional<std::string> optional_string(const json& params, const char* key) {
  auto it = params.find(key);
  if (it == params.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) throw protocol::ValueError(std::string("`") + key + "` must be a string");
  return it->get<std::string>();
}

}  // namespace

WorkerService::WorkerService(const WorkerOptions& options) : options_(options) {
  parallel_.data_parallel_rank = options.data_parallel_rank;
  parallel_.data_parallel_size = options.data_parallel_size;
  model_ = model_loader::LlamaModel::load(options.model, model_options(options));

  std::unique_ptr<receiver::WeightTransferEngine> engine;
  if (options.weight_transfer_config) {
    auto config = protocol::WeightTransferConfig::from_json(*options.weight_transfer_config);
    backend_ = config.backend;
    engine = receiver::WeightTransferEngineFactory::create_engine(
        receiver::EngineContext{config, parallel_, model_->device(), model_, options.timeout()});
  }
  controller_ = std::make_unique<WeightUpdateController>(std::move(engine), parallel_);
  scheduler_ = std::make_unique<GenerationScheduler>(
      model_, [this] { return controller_->weight_version(); });
  checker_ = std::make_unique<WeightChecker>(model_, parallel_.data_parallel_rank,
                                             parallel_.global_rank());
}

WorkerService::~WorkerService() {
  scheduler_.reset();  // aborts generation before the model goes
  controller_.reset();
}

bool WorkerService::is_long(const std::string& method) {
  return method != "health" && method != "weight_info" && method != "is_paused" &&
         method != "get_world_size" && method != "update_weight_version" && method != "resume";
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
      << parallel_.data_parallel_size;
  return out.str();
}

json WorkerService::health() const {
  bool dirty = model_->is_dirty();
  auto version = controller_->weight_version();
  return {{"status", dirty ? "dirty" : "ok"},
          {"dirty", dirty},
          {"model", std::string(model_->config().architecture_name())},
          {"backend", backend_.empty() ? json(nullptr) : json(backend_)},
          {"update_mode",
           options_.update_mode == model_loader::UpdateMode::kStaged ? "staged" : "inplace"},
          {"weight_update_active", controller_->session_active()},
          {"is_paused", scheduler_->is_paused()},
          {"weight_version", version ? json(*version) : json(nullptr)},
          {"data_parallel_rank", parallel_.data_parallel_rank}};
}

// Rejections of a malformed request body, before any work: vLLM's routes answer these with a
// 400 and record no metric.
static void check_request_body(const std::string& method, const json& params) {
  if (method == "init_weight_transfer_engine") {
    if (!required_object(params, "init_info").is_object()) {
      throw protocol::ValueError("`init_info` must be a JSON object");
    }
  } else if (method == "update_weights") {
    const json& info = required_object(params, "update_info");
    if (!info.is_object() && !info.is_array()) {
      throw protocol::ValueError("`update_info` must be an object or a list of objects");
    }
  } else if (method == "update_weight_version") {
    if (!optional_string(params, "new_version")) {
      throw protocol::ValueError("Missing 'new_version' in request body");
    }
  } else if (method == "finish_weight_update") {
    (void)optional_string(params, "weight_version");
  }
}

json WorkerService::call(const std::string& method, const json& params) {
  if (kOperationNames.contains(method)) {
    check_request_body(method, params);
    const std::string op = kOperationNames.at(method);
    const bool sets_version = method == "finish_weight_update" &&
                              params.contains("weight_version") &&
                              !params["weight_version"].is_null();
    auto start = Clock::now();
    {
      std::lock_guard lock(stats_mutex_);
      ++stats_[op].in_flight;
    }
    auto record = [&](bool ok) {
      std::lock_guard lock(stats_mutex_);
      auto& s = stats_[op];
      --s.in_flight;
      (ok ? s.success : s.error) += 1;
      s.seconds += std::chrono::duration<double>(Clock::now() - start).count();
      // vLLM counts a finish that carries a version as two operations.
      if (sets_version && ok) stats_["set_version"].success += 1;
    };
    try {
      json result = weight_call(method, params);
      record(true);
      return result;
    } catch (...) {
      record(false);
      throw;
    }
  }
  if (method == "health") return health();
  if (method == "weight_info") {
    auto v = controller_->weight_version();
    return {{"weight_version", v ? json(*v) : json(nullptr)}};
  }
  if (method == "is_paused") return {{"is_paused", scheduler_->is_paused()}};
  if (method == "get_world_size") {
    bool include_dp = params.value("include_dp", true);
    int size = parallel_.world_size() * (include_dp ? parallel_.data_parallel_size : 1);
    return {{"world_size", size}};
  }
  if (method == "pause") {
    std::string mode = params.contains("mode") && params["mode"].is_string()
                           ? params["mode"].get<std::string>()
                           : std::string("abort");
    // clear_cache: hotswap keeps no prefix cache, so there is nothing to clear.
    scheduler_->pause(pause_mode_from_name(mode), options_.timeout());
    return {{"status", "paused"}};
  }
  if (method == "resume") {
    scheduler_->resume();
    return {{"status", "resumed"}};
  }
  if (method == "weight_checker") return checker_->handle(params);
  if (method == "generate") return generate(params);
  if (method == "shutdown") {
    shutdown_requested_ = true;
    return {{"status", "shutting down"}};
  }
  throw protocol::MethodNotFound("Method not found: '" + method + "'");
}

json WorkerService::weight_call(const std::string& method, const json& params) {
  std::unique_lock lock(weight_ops_, std::defer_lock);
  if (!lock.try_lock_for(std::chrono::milliseconds(100))) {
    throw protocol::RuntimeError(
        "another weight-transfer call is still running on this worker; "
        "the four calls of one worker run one at a time");
  }
  const bool inplace = options_.update_mode == model_loader::UpdateMode::kInplace;
  auto release_hold_if_ended = [&] {
    if (update_hold_ && !controller_->session_active()) {
      scheduler_->release();
      update_hold_ = false;
    }
  };

  if (method == "init_weight_transfer_engine") {
    const json& init_info = required_object(params, "init_info");
    if (!init_info.is_object()) throw protocol::ValueError("`init_info` must be a JSON object");
    controller_->init_weight_transfer_engine(init_info);
    return {{"message", "Weight transfer initialized"}};
  }
  if (method == "shutdown_weight_transfer_engine") {
    controller_->shutdown_weight_transfer_engine();
    release_hold_if_ended();
    return {{"message", "Weight transfer shut down"}};
  }
  if (method == "start_weight_update" || method == "start_draft_weight_update") {
    // In place, generation must not read weights that are being written: hold it.
    if (inplace && !update_hold_ && !controller_->session_active()) {
      scheduler_->hold();
      update_hold_ = true;
    }
    try {
      if (method == "start_weight_update") {
        controller_->start_weight_update();
      } else {
        controller_->start_draft_weight_update();
      }
    } catch (...) {
      release_hold_if_ended();
      throw;
    }
    return {{"message", method == "start_weight_update" ? "Weight update started"
                                                        : "Draft weight update started"}};
  }
  if (method == "update_weights") {
    const json& update_info = required_object(params, "update_info");
    try {
      controller_->update_weights(update_info);
    } catch (...) {
      release_hold_if_ended();
      throw;
    }
    return {{"message", "Weights updated"}};
  }
  if (method == "finish_weight_update") {
    auto version = optional_string(params, "weight_version");
    // Staged: the commit and the new version land together between two generation steps.
    if (!update_hold_) scheduler_->hold();
    try {
      controller_->finish_weight_update(version);
    } catch (...) {
      if (!update_hold_) scheduler_->release();
      release_hold_if_ended();
      throw;
    }
    if (!update_hold_) scheduler_->release();
    release_hold_if_ended();
    return {{"message", "Weight update finished"}};
  }
  if (method == "update_weight_version") {
    auto version = optional_string(params, "new_version");
    if (!version) throw protocol::ValueError("Missing 'new_version' in request body");
    controller_->update_weight_version(*version);
    return {{"success", true}, {"new_version", *version}};
  }
  throw protocol::MethodNotFound("Method not found: '" + method + "'");
}

json WorkerService::generate(const json& params) {
  GenerateRequest request;
  auto ids = params.find("prompt_token_ids");
  if (ids == params.end() || !ids->is_array() || ids->empty()) {
    throw protocol::ValueError("`prompt_token_ids` must be a non-empty list of token ids");
  }
  for (const auto& id : *ids) {
    if (!id.is_number_integer())
      throw protocol::ValueError("`prompt_token_ids` must hold integers");
    request.prompt_token_ids.push_back(id.get<std::int64_t>());
  }
  auto& p = request.params;
  auto number = [&](const char* key, double fallback) {
    auto it = params.find(key);
    if (it == params.end() || it->is_null()) return fallback;
    if (!it->is_number()) throw protocol::ValueError(std::string("`") + key + "` must be a number");
    return it->get<double>();
  };
  p.max_tokens = static_cast<std::int64_t>(number("max_tokens", 16));
  p.temperature = number("temperature", 1.0);
  p.top_p = number("top_p", 1.0);
  if (auto it = params.find("seed"); it != params.end() && !it->is_null()) {
    if (!it->is_number_integer()) throw protocol::ValueError("`seed` must be an integer");
    p.seed = it->get<std::uint64_t>();
  }
  if (auto it = params.find("stop_token_ids"); it != params.end() && !it->is_null()) {
    if (!it->is_array()) throw protocol::ValueError("`stop_token_ids` must be a list of integers");
    for (const auto& id : *it)
      p.stop_token_ids.push_back(id.get<std::int64_t>());
  }
  if (auto it = params.find("logprobs"); it != params.end() && !it->is_null()) {
    // vLLM's `logprobs` is a count of alternatives; hotswap returns the sampled token's.
    request.logprobs = it->is_boolean() ? it->get<bool>() : it->is_number_integer();
  }
  bool logprobs = request.logprobs;
  auto future = scheduler_->submit(std::move(request));
  // A paused worker holds requests until resume(); the wait is bounded all the same.
  if (future.wait_for(options_.timeout()) != std::future_status::ready) {
    throw protocol::TimeoutError("generate did not complete within " +
                                 std::to_string(options_.timeout_seconds) + " s");
  }
  return future.get().to_json(logprobs);
}

std::map<std::string, WorkerService::OperationStats> WorkerService::operation_stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

}  // namespace hotswap::worker
