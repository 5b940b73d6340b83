#include "worker/weight_update_controller.hpp"

#include "protocol/errors.hpp"
#include "worker/parallel/rank_methods.hpp"
#include "worker/parallel/tensor_parallel_group.hpp"

namespace hotswap::worker {

WeightUpdateController::WeightUpdateController(
    std::unique_ptr<receiver::WeightTransferEngine> engine, receiver::ParallelConfig parallel)
    : engine_(std::move(engine)), parallel_(parallel) {}

WeightUpdateController::~WeightUpdateController() {
  if (engine_) {
    if (session_active()) engine_->abort_weight_update();
    engine_->shutdown();
  }
}

void WeightUpdateController::set_tensor_parallel_peers(std::shared_ptr<TensorParallelGroup> peers,
                                                       BetweenSteps between_steps) {
  peers_ = std::move(peers);
  between_steps_ = std::move(between_steps);
}

void WeightUpdateController::on_every_rank(std::string_view method, const nlohmann::json& params,
                                           const std::function<void()>& local) {
  if (!peers_) return local();
  using Channel = TensorParallelGroup::Channel;
  std::lock_guard lock(peers_->lock(Channel::kWeights));
  peers_->call_all(Channel::kWeights, method, params, local);
}

receiver::WeightTransferEngine& WeightUpdateController::engine() const {
  if (!engine_) {
    throw protocol::RuntimeError(
        "Weight transfer not configured. Please set weight_transfer_config to enable weight "
        "transfer.");
  }
  return *engine_;
}

void WeightUpdateController::init_weight_transfer_engine(const nlohmann::json& init_info) {
  auto& e = engine();
  // A new handshake supersedes a session its trainer never finished (it died before finish):
  // drop what that session staged, so the new trainer's start is clean.
  if (session_active()) end_session();
  on_every_rank(rank_methods::kInitWeightTransferEngine, {{"init_info", init_info}},
                [&] { e.init_transfer_engine(init_info); });
}

void WeightUpdateController::start_weight_update(
    std::shared_ptr<model_loader::LoadableModel> target, const nlohmann::json& peer_params) {
  auto& e = engine();
  {
    std::lock_guard lock(mutex_);
    if (active_) {
      throw protocol::RuntimeError(
          "start_weight_update called while a weight update is already active. Call "
          "finish_weight_update first.");
    }
    active_ = true;
  }
  try {
    if (target) {
      e.set_weight_update_target(std::move(target));
      std::lock_guard lock(mutex_);
      adapter_round_ = true;
    }
    on_every_rank(rank_methods::kStartWeightUpdate, peer_params, [&] { e.start_weight_update(); });
  } catch (...) {
    end_session();
    throw;
  }
}

void WeightUpdateController::start_draft_weight_update() {
  // hotswap has no speculative decoding, so no draft model to retarget an update at: the worker
  // answers as vLLM does when none is configured, or, for an engine that could not update one
  // anyway (the sparse ones, as vLLM's), with that engine's refusal, which vLLM checks first.
  if (!engine().supports_draft_weight_update()) {
    throw protocol::RuntimeError(std::string(engine().name()) +
                                 " does not support draft model weight updates.");
  }
  throw protocol::RuntimeError(
      "Draft model weight update requested, but no draft model is configured.");
}

std::optional<nlohmann::json> WeightUpdateController::select_update_info(
    const nlohmann::json& update_info, const receiver::ParallelConfig& parallel) {
  if (update_info.is_object()) return update_info;
  if (!update_info.is_array()) {
    throw protocol::ValueError("`update_info` must be an object or a list of objects, got " +
                               std::string(update_info.type_name()));
  }
  if (update_info.empty()) return std::nullopt;
  auto index = static_cast<std::size_t>(parallel.global_rank());
  if (index >= update_info.size()) {
    throw protocol::ValueError(
        "`update_info` has " + std::to_string(update_info.size()) +
        " entries but this worker takes entry " + std::to_string(index) + " (data_parallel_rank " +
        std::to_string(parallel.data_parallel_rank) + " × world_size " +
        std::to_string(parallel.world_size()) + " + rank " + std::to_string(parallel.rank) + ")");
  }
  if (!update_info[index].is_object()) {
    throw protocol::ValueError("`update_info[" + std::to_string(index) + "]` must be an object");
  }
  return update_info[index];
}

void WeightUpdateController::update_weights(const nlohmann::json& update_info) {
  auto& e = engine();
  {
    std::lock_guard lock(mutex_);
    if (!active_) {
      throw protocol::RuntimeError("start_weight_update must be called before update_weights.");
    }
  }
  try {
    // Each rank takes its own element of a per-rank list.
    on_every_rank(rank_methods::kUpdateWeights, {{"update_info", update_info}}, [&] {
      auto mine = select_update_info(update_info, parallel_);
      if (mine) e.update_weights(*mine);
    });
  } catch (...) {
    end_session();  // vLLM: an error in update_weights ends the session
    throw;
  }
}

void WeightUpdateController::finish_weight_update(const std::optional<std::string>& version) {
  auto& e = engine();
  require_session_to_finish();
  try {
    if (peers_) {
      on_every_rank(rank_methods::kPrepareFinish, nlohmann::json::object(),
                    [&] { e.drain_pending(); });
      between_steps_([&] {
        on_every_rank(rank_methods::kFinishWeightUpdate, nlohmann::json::object(),
                      [&] { e.finish_weight_update(); });
      });
    } else {
      e.finish_weight_update();
    }
  } catch (...) {
    end_session();
    throw;
  }
  e.reset_weight_update_target();
  std::lock_guard lock(mutex_);
  active_ = false;
  // An adapter's round leaves the model's weights, and so their version, as they were.
  if (version && !adapter_round_) weight_version_ = *version;
  adapter_round_ = false;
}

void WeightUpdateController::prepare_finish() {
  auto& e = engine();
  require_session_to_finish();
  try {
    e.drain_pending();
  } catch (...) {
    end_session();
    throw;
  }
}

void WeightUpdateController::require_session_to_finish() const {
  std::lock_guard lock(mutex_);
  if (!active_) {
    throw protocol::RuntimeError(
        "finish_weight_update called without a matching start_weight_update.");
  }
}

void WeightUpdateController::shutdown_weight_transfer_engine(bool abort_update) {
  auto& e = engine();
  // vLLM 0.34: a session in progress keeps its trainer; its finish, or a new init, ends it. A
  // trainer that knows its round failed after every byte landed may end it (`abort_update`).
  if (session_active()) {
    if (!abort_update) {
      throw protocol::RuntimeError("Cannot release a trainer connection during a weight update");
    }
    end_session();
  }
  on_every_rank(rank_methods::kShutdownWeightTransferEngine, nlohmann::json::object(),
                [&] { e.shutdown(); });
}

void WeightUpdateController::update_weight_version(const std::string& new_version) {
  std::lock_guard lock(mutex_);
  weight_version_ = new_version;
}

std::optional<std::string> WeightUpdateController::weight_version() const {
  std::lock_guard lock(mutex_);
  return weight_version_;
}

bool WeightUpdateController::session_active() const {
  std::lock_guard lock(mutex_);
  return active_;
}

void WeightUpdateController::abort_weight_update() {
  if (engine_ && session_active()) end_session();
}

void WeightUpdateController::end_session() {
  engine_->abort_weight_update();
  engine_->reset_weight_update_target();
  if (peers_) {
    // Best effort: a rank that cannot be reached has failed the whole worker already.
    try {
      on_every_rank(rank_methods::kAbortWeightUpdate, nlohmann::json::object(), [] {});
    } catch (const std::exception&) {
    }
  }
  std::lock_guard lock(mutex_);
  active_ = false;
  adapter_round_ = false;
}

}  // namespace hotswap::worker
