#include "worker/weight_session.hpp"

#include <chrono>
#include <set>

#include "model_loader/lora/lora_staging.hpp"
#include "protocol/errors.hpp"
#include "protocol/method_params.hpp"
#include "worker/parallel/tensor_parallel_model.hpp"

namespace hotswap::worker {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// An adapter's round in flight: rank 0's adapter once its staging has built it, and, with tensor
// parallelism, the id the other ranks commit their shards under. It is served only after every
// rank's finish returned (serve_adapter_round): a rank that failed leaves nothing served. An id
// never served is forgotten when this goes, and the ranks that committed under it let go.
struct WeightSession::PendingAdapter {
  std::string name;
  std::shared_ptr<TensorParallelModel> sharded;  // tp > 1
  std::uint64_t id = 0;
  std::shared_ptr<const model_loader::LoraAdapter> built;
  bool served = false;

  ~PendingAdapter() {
    if (sharded && !served) sharded->forget_lora_id(id);
  }
};

// Calls let_go_if_ended as a session's call returns or throws.
struct WeightSession::LetGoIfEnded {
  WeightSession& session;
  ~LetGoIfEnded() { session.let_go_if_ended(); }
};

WeightSession::WeightSession(Parts parts) : parts_(std::move(parts)) {}

WeightSession::~WeightSession() = default;

void WeightSession::run(const protocol::ControlMethod& method, const std::function<void()>& call) {
  const std::string op(method.metric_operation);
  {
    std::lock_guard guard(stats_mutex_);
    ++stats_[op].in_flight;
  }
  // Declared before the record, so that the record's last words (the name cleared from health)
  // come while this call still holds the lock, never over the next call's name.
  std::unique_lock lock(one_call_at_a_time_, std::defer_lock);
  // However the call ends, a refusal for another call in flight included (vLLM times every call
  // of the route under its operation): counted, and no longer named in health.
  struct Record {
    WeightSession& session;
    const std::string& op;
    Clock::time_point start;
    bool ok = false;
    bool named = false;
    ~Record() {
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      std::lock_guard guard(session.stats_mutex_);
      if (named) session.current_call_.clear();
      auto& s = session.stats_[op];
      --s.in_flight;
      (ok ? s.success : s.error) += 1;
      s.seconds += seconds;
      for (std::size_t i = 0; i < kDurationBuckets.size(); ++i) {
        if (seconds <= kDurationBuckets[i]) {
          ++s.within[i];
          break;
        }
      }
    }
  } record{*this, op, Clock::now()};
  if (!lock.try_lock_for(std::chrono::milliseconds(100))) {
    throw protocol::RuntimeError(
        "another weight-transfer call is still running on this worker; "
        "the four calls of one worker run one at a time");
  }
  {
    std::lock_guard guard(stats_mutex_);
    current_call_ = method.name;  // an orchestrator (or a test) sees what the worker is in
    record.named = true;
  }
  call();
  record.ok = true;
}

void WeightSession::let_go_if_ended() {
  if (parts_.controller.session_active()) return;
  session_hold_.reset();
  pending_adapter_.reset();
}

void WeightSession::init_weight_transfer_engine(const json& params) {
  parts_.controller.init_weight_transfer_engine(protocol::init_info_of(params));
}

void WeightSession::shutdown_weight_transfer_engine(const json& params) {
  LetGoIfEnded let_go{*this};
  parts_.controller.shutdown_weight_transfer_engine(protocol::abort_update_of(params));
}

void WeightSession::start_session(const json& params, const std::function<void()>& begin) {
  // An adapter's round writes no weight the model reads: generation goes on.
  const bool for_adapter =
      params.is_object() && params.contains("lora_name") && !params.at("lora_name").is_null();
  if (parts_.update_mode == model_loader::UpdateMode::kInplace && !for_adapter && !session_hold_ &&
      !parts_.controller.session_active()) {
    session_hold_.emplace(parts_.scheduler);
  }
  // A start refused because a session is active leaves that session, its hold and its adapter
  // as they were; one that failed otherwise ends here.
  LetGoIfEnded let_go{*this};
  begin();
}

void WeightSession::start_weight_update(const json& params) {
  start_session(params, [&] {
    auto round = adapter_round(params);
    if (parts_.sharded) {
      // Adapters rank 0 let go: their shards go too (training may push many rounds without a
      // step between them).
      round.peer_params["released_loras"] = parts_.sharded->take_released_loras();
    }
    parts_.controller.start_weight_update(std::move(round.staging), round.peer_params);
    // Only once it started: a start refused (a session already active) leaves that session's
    // adapter to be served.
    pending_adapter_ = std::move(round.pending);
  });
}

void WeightSession::start_draft_weight_update() {
  start_session(json::object(), [&] { parts_.controller.start_draft_weight_update(); });
}

void WeightSession::update_weights(const json& params) {
  LetGoIfEnded let_go{*this};
  parts_.controller.update_weights(protocol::update_info_of(params));
}

void WeightSession::finish_weight_update(const json& params) {
  const auto version = protocol::weight_version_of(params);
  LetGoIfEnded let_go{*this};
  // Staged: the commit and the new version land together between two generation steps (in
  // place, the session's hold already stops them). Released before the session's own hold.
  std::optional<GenerationHold> commit_hold;
  if (!session_hold_) commit_hold.emplace(parts_.scheduler);
  parts_.controller.finish_weight_update(version);
  // Every rank finished: an adapter's round serves its adapter now, still between two steps.
  serve_adapter_round(version);
}

WeightSession::AdapterRound WeightSession::adapter_round(const json& params) {
  const auto request = protocol::StartWeightUpdateParams::from_json(params);
  if (!request.lora_name) return {};
  const std::string name = *request.lora_name;
  auto& loras = parts_.loras;
  loras.check_load(name, /*in_place=*/true);  // enabled, its own name, room for a new one
  const model_loader::WeightMapping* mapping = parts_.model->weight_mapping();
  if (mapping == nullptr) throw protocol::ValueError("this model takes no LoRA adapters");
  const auto served = loras.entry(name);
  model_loader::LoraConfig config;
  std::set<std::string> required;  // a served adapter is replaced whole, at its config
  if (request.lora_config) {
    config =
        model_loader::LoraConfig::from_json(*request.lora_config, loras.limits().max_lora_rank);
  } else if (served) {
    config = served->adapter->config();
    required = served->adapter->tensor_names();
  } else {
    throw protocol::ValueError("no LoRA adapter '" + name +
                               "' is served: a round that makes one gives its `lora_config` "
                               "(PEFT's adapter_config.json fields: r, lora_alpha, ...)");
  }
  AdapterRound round;
  round.pending = std::make_shared<PendingAdapter>();
  round.pending->name = name;
  if (parts_.sharded) {
    // Every other rank stages its shard of the adapter and commits it under this id.
    round.pending->sharded = parts_.sharded;
    round.pending->id = parts_.sharded->new_lora_id();
    round.peer_params["lora"] = {{"id", round.pending->id},
                                 {"config", config.to_json()},
                                 {"max_rank", loras.limits().max_lora_rank},
                                 {"required", required}};
  }
  round.staging = std::make_shared<model_loader::LoraStaging>(
      *mapping, parts_.model->device(), std::move(config), std::move(required),
      [pending = round.pending](std::shared_ptr<const model_loader::LoraAdapter> adapter) {
        pending->built = std::move(adapter);
      });
  return round;
}

void WeightSession::serve_adapter_round(const std::optional<std::string>& version) {
  auto pending = std::move(pending_adapter_);
  if (!pending || !pending->built) return;
  auto adapter = std::move(pending->built);
  if (pending->sharded) {
    // The id's release is the shared adapter's from here on, served or not.
    adapter = pending->sharded->share_lora_adapter(std::move(adapter), pending->id);
    pending->served = true;
  }
  parts_.loras.commit(pending->name, std::move(adapter), "weight-transfer:" + pending->name,
                      version);
}

std::string WeightSession::current_call() const {
  std::lock_guard guard(stats_mutex_);
  return current_call_;
}

std::map<std::string, WeightSession::OperationStats> WeightSession::operation_stats() const {
  std::lock_guard guard(stats_mutex_);
  return stats_;
}

std::vector<std::uint64_t> WeightSession::bytes_received_by_rank() const {
  std::vector<std::uint64_t> bytes{parts_.controller.bytes_received()};
  if (parts_.peers) {
    for (std::uint64_t b : parts_.peers->peer_bytes_received())
      bytes.push_back(b);
  }
  return bytes;
}

}  // namespace hotswap::worker
