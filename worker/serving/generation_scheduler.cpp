#include "worker/serving/generation_scheduler.hpp"

#include <algorithm>
#include <set>

#include "protocol/errors.hpp"
#include "transport/exception_text.hpp"

namespace hotswap::worker {

PauseMode pause_mode_from_name(const std::string& name) {
  if (name == "abort") return PauseMode::kAbort;
  if (name == "wait") return PauseMode::kWait;
  if (name == "keep") return PauseMode::kKeep;
  throw protocol::ValueError("Invalid pause mode '" + name + "': expected abort, wait or keep");
}

nlohmann::json GenerateResult::to_json(bool with_logprobs, bool with_versions) const {
  nlohmann::json spans = nullptr;
  if (with_versions) {
    spans = nlohmann::json::array();
    auto text = [](const std::optional<std::string>& v) {
      return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
    };
    for (const auto& s : weight_versions) {
      nlohmann::json span = {text(s.version), s.start, s.end};
      if (s.lora) span.push_back(text(s.lora_version));  // [version, start, end, lora_version]
      spans.push_back(std::move(span));
    }
  }
  nlohmann::json out = {
      {"token_ids", token_ids}, {"finish_reason", finish_reason}, {"weight_versions", spans}};
  if (with_logprobs) out["logprobs"] = logprobs;
  return out;
}

GenerationScheduler::GenerationScheduler(std::shared_ptr<const model_loader::ServableModel> model,
                                         VersionSource version, SchedulerLimits limits,
                                         ServingMetrics* metrics, const LoraRegistry* loras)
    : model_(std::move(model)),
      version_(std::move(version)),
      limits_(limits),
      metrics_(metrics),
      loras_(loras) {
  if (limits_.max_num_seqs < 1 || limits_.max_num_batched_tokens < 1) {
    throw protocol::ValueError("max_num_seqs and max_num_batched_tokens must be at least 1");
  }
  thread_ = std::thread([this] { loop(); });
}

GenerationScheduler::~GenerationScheduler() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  abort_all();
}

void GenerationScheduler::abort_all() {
  for (auto& r : running_) {
    r.sequence->abort();
    finish(r);
  }
  for (auto& r : waiting_) {
    r.sequence->abort();
    finish(r);
  }
  running_.clear();
  waiting_.clear();
}

void GenerationScheduler::wait_out_step(std::unique_lock<std::mutex>& lock) {
  // The count keeps the loop from re-entering a step before this thread gets the lock.
  ++interrupts_;
  stepped_.wait(lock, [&] { return !stepping_; });
  --interrupts_;
}

std::unique_lock<std::mutex> GenerationScheduler::caller_lock() {
  ++callers_waiting_;
  std::unique_lock lock(mutex_);
  --callers_waiting_;
  return lock;
}

std::uint64_t GenerationScheduler::submit(GenerateRequest request, Clock::time_point deadline,
                                          Completion done) {
  if (model_->is_dirty()) {
    throw protocol::RuntimeError(
        "the model is dirty: an in-place weight update failed part-way, and generation is "
        "refused until a full update commits");
  }
  Running r;
  r.sequence = std::make_unique<model_loader::Sequence>(std::move(request.prompt_token_ids),
                                                        request.params, std::move(request.lora));
  for (auto id : r.sequence->prompt()) {
    if (id < 0 || id >= model_->config().vocab_size) {
      throw protocol::ValueError("prompt token id " + std::to_string(id) + " is outside 0.." +
                                 std::to_string(model_->config().vocab_size - 1));
    }
  }
  r.done = std::move(done);
  r.request_id = std::move(request.request_id);
  r.lora_name = std::move(request.lora_name);
  r.deadline = deadline;
  r.on_token = std::move(request.on_token);
  r.arrival = Clock::now();
  std::uint64_t ticket = 0;
  {
    // After the lock is let go, on every path: the loop may be waiting for this caller.
    struct WakeLoop {
      std::condition_variable& wake;
      ~WakeLoop() { wake.notify_all(); }
    } wake_loop{wake_};
    auto lock = caller_lock();
    if (closed_) throw protocol::RuntimeError("the worker is shutting down");
    if ((paused_ && pause_mode_ != PauseMode::kKeep) || draining_) {
      throw protocol::OverloadedError("Generation is paused. Please retry after it resumes.");
    }
    if (waiting_.size() >= limits_.max_waiting) {
      throw protocol::OverloadedError(
          "the worker is overloaded: " + std::to_string(waiting_.size()) +
          " generate requests are already waiting for a batch slot (--max-queued-requests); "
          "retry later");
    }
    ticket = r.ticket = next_ticket_++;
    waiting_.push_back(std::move(r));
  }
  return ticket;
}

bool GenerationScheduler::cancel(std::uint64_t ticket) {
  std::lock_guard lock(mutex_);
  return cancel_locked(ticket);
}

std::size_t GenerationScheduler::abort_requests(const std::vector<std::string>& request_ids) {
  std::lock_guard lock(mutex_);
  std::vector<std::uint64_t> tickets;
  std::set<std::string> ended;
  auto pick = [&](const Running& r) {
    const bool named = request_ids.empty() || std::find(request_ids.begin(), request_ids.end(),
                                                        r.request_id) != request_ids.end();
    if (!named) return;
    tickets.push_back(r.ticket);
    ended.insert(r.request_id);
  };
  for (const auto& r : waiting_)
    pick(r);
  for (const auto& r : running_)
    pick(r);
  for (auto ticket : tickets)
    cancel_locked(ticket);
  // vLLM counts the ids it was given, known or not; asked for everything, what it ended.
  return request_ids.empty() ? ended.size() : request_ids.size();
}

bool GenerationScheduler::cancel_locked(std::uint64_t ticket) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->ticket == ticket) {
      it->sequence->abort();
      finish(*it);
      waiting_.erase(it);
      return true;
    }
  }
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if (it->ticket != ticket) continue;
    if (stepping_) {
      cancelled_.push_back(ticket);  // the loop ends it once the step is done
      wake_.notify_all();
    } else {
      it->sequence->abort();
      finish(*it);
      running_.erase(it);
      stepped_.notify_all();
    }
    return true;
  }
  return false;
}

void GenerationScheduler::record_end(const Running& r, const std::string& reason) {
  if (metrics_ == nullptr) return;
  metrics_->request_finished(std::chrono::duration<double>(Clock::now() - r.arrival).count(),
                             reason);
}

void GenerationScheduler::finish(Running& r) {
  const auto& s = *r.sequence;
  GenerateResult result{s.output_tokens(), s.output_logprobs(), s.finish_reason().value_or("abort"),
                        r.spans};
  record_end(r, result.finish_reason);
  auto done = std::move(r.done);
  if (done) done(GenerateOutcome{std::move(result), nullptr});
}

void GenerationScheduler::fail(Running& r, std::exception_ptr error) {
  record_end(r, "abort");
  auto done = std::move(r.done);
  if (done) done(GenerateOutcome{std::nullopt, std::move(error)});
}

void GenerationScheduler::admit() {
  // A running sequence decodes one token this step, or recomputes its prompt and output after a
  // preemption; each newcomer prefills its prompt.
  std::size_t tokens = 0;
  for (const auto& r : running_)
    tokens += static_cast<std::size_t>(r.sequence->next_step_tokens());
  while (!draining_ && !waiting_.empty() && running_.size() < limits_.max_num_seqs) {
    const std::size_t prompt = waiting_.front().sequence->prompt().size();
    // First come, first served: a prompt over the budget waits for the batch to empty, then runs
    // alone, and nothing behind it overtakes it.
    if (tokens + prompt > limits_.max_num_batched_tokens && tokens != 0) break;
    tokens += prompt;
    if (metrics_ != nullptr) metrics_->prompt_tokens(prompt);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

GenerationScheduler::Clock::time_point GenerationScheduler::expire(Clock::time_point now) {
  auto next = Clock::time_point::max();
  auto sweep = [&](auto& requests) {
    for (auto it = requests.begin(); it != requests.end();) {
      if (it->deadline <= now) {
        it->sequence->abort();
        fail(*it, std::make_exception_ptr(protocol::TimeoutError(
                      "generate did not complete before its deadline (--timeout); the request "
                      "was cancelled after " +
                      std::to_string(it->sequence->output_tokens().size()) + " tokens")));
        it = requests.erase(it);
      } else {
        next = std::min(next, it->deadline);
        ++it;
      }
    }
  };
  sweep(waiting_);
  sweep(running_);
  return next;
}

void GenerationScheduler::loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    auto next_deadline = expire(Clock::now());
    auto ready = [&] {
      bool admissible = !waiting_.empty() && !paused_ && !draining_;
      return stop_ || !cancelled_.empty() ||
             (holds_ == 0 && interrupts_ == 0 && callers_waiting_ == 0 && !paused_ &&
              (admissible || !running_.empty()));
    };
    stepped_.notify_all();  // expired requests may have ended a pause(wait)'s drain
    if (next_deadline == Clock::time_point::max()) {
      wake_.wait(lock, ready);
    } else if (!wake_.wait_until(lock, next_deadline, ready)) {
      continue;  // a deadline passed
    }
    if (stop_) return;
    // Requests whose callers went away during the last step.
    for (auto ticket : std::exchange(cancelled_, {})) {
      for (auto it = running_.begin(); it != running_.end(); ++it) {
        if (it->ticket == ticket) {
          it->sequence->abort();
          finish(*it);
          running_.erase(it);
          break;
        }
      }
    }
    if (holds_ != 0 || interrupts_ != 0 || paused_) continue;
    admit();
    if (running_.empty()) continue;
    refresh_adapters();
    std::vector<model_loader::Sequence*> batch;
    std::int64_t preemptions_before = 0;
    for (auto& r : running_) {
      batch.push_back(r.sequence.get());
      preemptions_before += r.sequence->preemptions();
    }
    stepping_ = true;
    lock.unlock();

    std::optional<std::string> version = version_();
    std::string error;
    try {
      model_loader::step(*model_, batch);
    } catch (const std::exception& e) {
      error = transport::one_line_cause(e);
    }

    lock.lock();
    stepping_ = false;
    const auto now = Clock::now();
    if (metrics_ != nullptr && error.empty()) {
      const auto ran = std::count_if(batch.begin(), batch.end(),
                                     [](const auto* s) { return !s->preempted() && !s->error(); });
      metrics_->generation_tokens(static_cast<std::size_t>(ran));
      std::int64_t preemptions = -preemptions_before;
      for (const auto* s : batch)
        preemptions += s->preemptions();
      metrics_->preemptions(static_cast<std::uint64_t>(preemptions));
    }
    for (auto it = running_.begin(); it != running_.end();) {
      auto& s = *it->sequence;
      // Left out of the step to free KV cache blocks (or to wait for them): it did not run, and
      // recomputes on a later step.
      if (s.preempted() && !s.error()) {
        ++it;
        continue;
      }
      // A failed forward fails the batch it ran; a sequence that failed on its own (its
      // sampling, or a KV cache too small for it) fails alone.
      const std::string& cause = error.empty() && s.error() ? *s.error() : error;
      if (!cause.empty()) {
        fail(*it, std::make_exception_ptr(protocol::RuntimeError("generation failed: " + cause)));
        it = running_.erase(it);
        continue;
      }
      auto produced = static_cast<std::int64_t>(s.output_tokens().size());
      const VersionSpan span{version, produced - 1, produced, !it->lora_name.empty(),
                             it->lora_version};
      if (it->spans.empty() || !it->spans.back().same_weights(span)) {
        it->spans.push_back(span);
      } else {
        it->spans.back().end = produced;
      }
      if (metrics_ != nullptr) {
        const auto since = produced == 1 ? it->arrival : it->last_token;
        const double seconds = std::chrono::duration<double>(now - since).count();
        produced == 1 ? metrics_->time_to_first_token(seconds)
                      : metrics_->time_per_output_token(seconds);
      }
      it->last_token = now;
      // A stop string on the last allowed token still ends the request as "stop", as vLLM has it.
      if (it->on_token && !it->on_token(s, version) && s.finish_reason() != "abort") s.stop();
      if (s.finished()) {
        finish(*it);
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
    stepped_.notify_all();
  }
}

void GenerationScheduler::pause(PauseMode mode, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  // Stop the loop after the step in progress: pausing never tears a step.
  wait_out_step(lock);
  switch (mode) {
    case PauseMode::kAbort:  // queued requests count as in flight too
      abort_all();
      paused_ = true;
      pause_mode_ = mode;
      break;
    case PauseMode::kKeep:
      paused_ = true;
      pause_mode_ = mode;
      break;
    case PauseMode::kWait: {
      if (paused_) break;  // already paused: nothing runs, nothing to drain
      draining_ = true;
      wake_.notify_all();
      bool drained = stepped_.wait_for(lock, timeout, [&] { return running_.empty(); });
      draining_ = false;
      if (!drained) {
        wake_.notify_all();
        throw protocol::TimeoutError("pause(wait): requests in flight did not finish within " +
                                     std::to_string(timeout.count()) + " ms");
      }
      paused_ = true;
      pause_mode_ = mode;
      break;
    }
  }
  wake_.notify_all();
}

void GenerationScheduler::shutdown() {
  std::unique_lock lock(mutex_);
  closed_ = true;
  wait_out_step(lock);
  abort_all();
  stepped_.notify_all();
}

void GenerationScheduler::resume() {
  {
    std::lock_guard lock(mutex_);
    paused_ = false;
  }
  wake_.notify_all();
}

bool GenerationScheduler::is_paused() const {
  std::lock_guard lock(mutex_);
  return paused_;
}

void GenerationScheduler::hold() {
  std::unique_lock lock(mutex_);
  ++holds_;  // the loop takes no new step from here on
  stepped_.wait(lock, [&] { return !stepping_; });
}

void GenerationScheduler::release() {
  {
    std::lock_guard lock(mutex_);
    if (holds_ > 0) --holds_;
  }
  wake_.notify_all();
}

std::size_t GenerationScheduler::in_flight() const {
  std::lock_guard lock(mutex_);
  return running_.size() + waiting_.size();
}

std::size_t GenerationScheduler::running() const {
  std::lock_guard lock(mutex_);
  return running_.size();
}

std::size_t GenerationScheduler::waiting() const {
  std::lock_guard lock(mutex_);
  return waiting_.size();
}

void GenerationScheduler::refresh_adapters() {
  if (loras_ == nullptr) return;
  for (auto& r : running_) {
    if (r.lora_name.empty()) continue;
    auto served = loras_->find(r.lora_name);
    // Unloaded (and maybe another adapter loaded under the name): it finishes on the one it has.
    if (!served || (r.lora_id != 0 && served->id != r.lora_id)) continue;
    r.lora_id = served->id;
    if (served->adapter != r.sequence->lora()) r.sequence->set_lora(std::move(served->adapter));
    r.lora_version = std::move(served->version);
  }
}

GenerationScheduler::LoraNames GenerationScheduler::lora_names() const {
  std::set<std::string> running, waiting;
  {
    std::lock_guard lock(mutex_);
    for (const auto& r : running_) {
      if (!r.lora_name.empty()) running.insert(r.lora_name);
    }
    for (const auto& r : waiting_) {
      if (!r.lora_name.empty()) waiting.insert(r.lora_name);
    }
  }
  return {{running.begin(), running.end()}, {waiting.begin(), waiting.end()}};
}

}  // namespace hotswap::worker
