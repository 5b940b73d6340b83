// GenerationScheduler: the worker's generation loop, continuously batched. Requests wait in a
// queue and join the running batch at the next step; every step advances the running sequences
// by one token (see model_loader/generation; those preempted for KV cache blocks wait and
// recompute) and a sequence leaves the batch the step it ends.
// Two limits bound a step, as vLLM's flags of the same names do: at most `max_num_seqs`
// sequences run, and a step computes at most `max_num_batched_tokens` tokens (each decode is one,
// a prefill its whole prompt, a recompute after a preemption its prompt and output; a newcomer
// is admitted only within the budget, and one longer than it runs alone). Each request may watch
// its tokens as they come (`on_token`: streaming, stop strings). Between two steps the weights
// may change (a staged commit), and each request records which weight_version produced which of
// its tokens as [version, start, end) spans. So may a LoRA adapter: before each step, a request
// that runs through one takes the adapter served under its name then (a round or an in-place
// load replaced it), and its spans say which adapter version each token came from too.
//
// pause(mode): `abort` ends every request in flight with finish_reason "abort"; `wait` lets them
// finish and admits nothing new; `keep` freezes them where they are, to continue after resume()
// on whatever weights are then live. While paused in `abort` or `wait` (and while `wait`
// drains), new requests are refused with vLLM 0.34's 503 (an OverloadedError: retry after
// resume); in `keep` they wait. pause/resume are idempotent. hold()/release() stop stepping without
// pausing (in-place updates, commits).
//
// Bounded: at most `max_waiting` requests wait for a batch slot (past it, submit refuses with an
// OverloadedError), every request has a deadline after which it is dropped wherever it is (its
// caller has given up), and a caller that went away cancels its request. No request holds a
// thread of its own while it waits: its completion is a callback.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_loader/generation.hpp"
#include "model_loader/servable_model.hpp"
#include "worker/serving/lora_registry.hpp"
#include "worker/serving/serving_metrics.hpp"

namespace hotswap::worker {

enum class PauseMode { kAbort, kWait, kKeep };
PauseMode pause_mode_from_name(const std::string& name);  // ValueError naming a bad mode

struct GenerateRequest {
  std::vector<std::int64_t> prompt_token_ids;
  model_loader::SamplingParams params;
  bool logprobs = false;
  // The external id abort_requests() names it by (a completion's choices share theirs).
  std::string request_id;
  // The LoRA adapter it runs through (a request's `model` naming one) and that name, which
  // /metrics reports; null and empty: the base model.
  std::shared_ptr<const model_loader::LoraAdapter> lora;
  std::string lora_name;
  // Called after every step that gave this request a token, on the scheduler's thread with its
  // lock held (it must be quick and must not call back into the scheduler), with the version
  // that produced the token. Returning false ends the request there, finish_reason "stop".
  std::function<bool(const model_loader::Sequence&, const std::optional<std::string>& version)>
      on_token;
};

struct SchedulerLimits {
  std::size_t max_num_seqs = 64;              // sequences in one step
  std::size_t max_num_batched_tokens = 2048;  // tokens computed in one step
  std::size_t max_waiting = 4096;             // requests waiting for a slot
};

struct VersionSpan {
  std::optional<std::string> version;
  std::int64_t start = 0;
  std::int64_t end = 0;
  // A request through a LoRA adapter: the adapter's version (LoraRegistry::Entry::version) that
  // produced these tokens with the model's `version`.
  bool lora = false;
  std::optional<std::string> lora_version;

  bool same_weights(const VersionSpan& other) const {
    return version == other.version && lora == other.lora && lora_version == other.lora_version;
  }
};

struct GenerateResult {
  std::vector<std::int64_t> token_ids;
  std::vector<double> logprobs;
  std::string finish_reason;
  std::vector<VersionSpan> weight_versions;

  // `generate`'s result; `weight_versions` is null without `with_versions`.
  nlohmann::json to_json(bool with_logprobs, bool with_versions = true) const;
};

// What a request ends with: a result, or the error that ended it (a TimeoutError past its
// deadline, a RuntimeError when a step failed).
struct GenerateOutcome {
  std::optional<GenerateResult> result;
  std::exception_ptr error;
};

class GenerationScheduler {
 public:
  using VersionSource = std::function<std::optional<std::string>()>;
  using Clock = std::chrono::steady_clock;
  // Called exactly once per submitted request, from the scheduler's thread or the one that
  // ended it (pause, cancel), with the scheduler's lock held: it must not call back into the
  // scheduler.
  using Completion = std::function<void(GenerateOutcome)>;

  // `metrics`, if given, records the serving figures and must outlive the scheduler; so must
  // `loras`, the adapters requests run through by name, when given.
  GenerationScheduler(std::shared_ptr<const model_loader::ServableModel> model,
                      VersionSource version, SchedulerLimits limits = {},
                      ServingMetrics* metrics = nullptr, const LoraRegistry* loras = nullptr);
  ~GenerationScheduler();  // aborts what is in flight and joins the loop
  GenerationScheduler(const GenerationScheduler&) = delete;
  GenerationScheduler& operator=(const GenerationScheduler&) = delete;

  // Queues a request and returns its ticket; `done` gets its outcome later, a TimeoutError once
  // `deadline` passes. Throws at once (and never calls `done`): ValueError for bad parameters,
  // RuntimeError while the model is dirty, OverloadedError when max_waiting are already waiting.
  std::uint64_t submit(GenerateRequest request, Clock::time_point deadline, Completion done);
  // The most requests that can ever wait at once: a request of more sequences than this can
  // never be queued, at any load.
  std::size_t max_waiting() const { return limits_.max_waiting; }
  // Ends a request whose caller went away: `done` gets what it produced so far, finish_reason
  // "abort". False when it had already ended.
  bool cancel(std::uint64_t ticket);
  // vLLM's abort_requests: ends every request whose external id is in `request_ids` (every
  // request in flight when empty), finish_reason "abort". Returns vLLM's count: the ids given,
  // known or not, or with none given, how many external ids it ended.
  std::size_t abort_requests(const std::vector<std::string>& request_ids);

  // Returns once paused; `wait` blocks until the requests in flight finish (TimeoutError after
  // `timeout`).
  void pause(PauseMode mode, std::chrono::milliseconds timeout);
  void resume();
  bool is_paused() const;

  // Ends every request (finish_reason "abort") and refuses new ones from now on: the worker is
  // shutting down and its callers should hear so before their servers go.
  void shutdown();

  // Stops stepping (after the step in progress) until every hold is released.
  void hold();
  void release();

  std::size_t in_flight() const;
  std::size_t running() const;
  std::size_t waiting() const;
  // The LoRA adapters of the requests running and of those waiting, by name, each once, sorted
  // (vLLM's vllm:lora_requests_info labels).
  struct LoraNames {
    std::vector<std::string> running, waiting;
  };
  LoraNames lora_names() const;

 private:
  struct Running {
    std::uint64_t ticket = 0;
    std::string request_id;
    std::string lora_name;
    std::optional<std::string> lora_version;  // of the adapter its next step runs through
    std::int64_t lora_id = 0;  // the registry entry it runs through (0: not looked up yet)
    std::unique_ptr<model_loader::Sequence> sequence;
    Completion done;
    Clock::time_point deadline;
    std::vector<VersionSpan> spans;
    std::function<bool(const model_loader::Sequence&, const std::optional<std::string>&)> on_token;
    Clock::time_point arrival;
    Clock::time_point last_token;
  };

  void loop();
  // With the lock held: returns once no step is running, and keeps the loop from starting one
  // until the lock is let go.
  void wait_out_step(std::unique_lock<std::mutex>& lock);
  // With the lock held: ends every request, running or waiting, with finish_reason "abort".
  void abort_all();
  // With the lock held: ends one request (cancel()'s work).
  bool cancel_locked(std::uint64_t ticket);
  void finish(Running& r);
  void fail(Running& r, std::exception_ptr error);
  // The serving metrics of a request that ended with `reason`.
  void record_end(const Running& r, const std::string& reason);
  // Moves waiting requests into the batch within the limits.
  void admit();
  // With the lock held, before a step: each running request through a LoRA adapter takes the
  // adapter served under its name now, and its version; one whose adapter was unloaded (the name
  // gone, or now another adapter's) finishes on the one it has.
  void refresh_adapters();
  // Ends every request whose deadline passed; returns the earliest deadline left.
  Clock::time_point expire(Clock::time_point now);
  // mutex_, for a caller, ahead of the loop's next step. The loop takes the lock back the moment
  // a step ends: on a fast model a caller could wait dozens of steps for it (a request submitted
  // mid-decode joined after 36, seen). The loop starts no step while one waits; a caller that
  // took it this way wakes the loop when it lets it go.
  std::unique_lock<std::mutex> caller_lock();

  std::shared_ptr<const model_loader::ServableModel> model_;
  VersionSource version_;
  SchedulerLimits limits_;
  ServingMetrics* metrics_;
  const LoraRegistry* loras_;
  std::uint64_t next_ticket_ = 1;
  std::vector<std::uint64_t> cancelled_;  // running requests to end after the step in progress

  mutable std::mutex mutex_;
  std::condition_variable wake_;     // the loop waits here for work
  std::condition_variable stepped_;  // pause/hold wait here for the loop
  std::deque<Running> waiting_;
  std::vector<Running> running_;
  bool paused_ = false;
  PauseMode pause_mode_ = PauseMode::kAbort;  // of the pause in force, while paused_
  bool draining_ = false;                     // pause(wait) in progress: admit nothing new
  int holds_ = 0;
  int interrupts_ = 0;                   // pause() calls waiting for the step in progress
  std::atomic<int> callers_waiting_{0};  // callers blocked on mutex_ (caller_lock)
  bool stepping_ = false;
  bool stop_ = false;
  bool closed_ = false;  // shutdown(): no new requests
  std::thread thread_;
};

}  // namespace hotswap::worker
