// GenerationScheduler: the worker's generation loop. Requests wait in a queue and join the
// running batch at the next step; every step advances all running sequences by one token (see
// model_loader/generation). Between two steps the weights may change (a staged commit), and
// each request records which weight_version produced which of its tokens as
// [version, start, end) spans.
//
// pause(mode): `abort` ends every request in flight with finish_reason "abort"; `wait` lets them
// finish and admits nothing new; `keep` freezes them where they are, to continue after resume()
// on whatever weights are then live. While paused, new requests wait. pause/resume are
// idempotent. hold()/release() stop stepping without pausing (in-place updates, commits).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_loader/generation.hpp"
#include "model_loader/llama_model.hpp"

namespace hotswap::worker {

enum class PauseMode { kAbort, kWait, kKeep };
PauseMode pause_mode_from_name(const std::string& name);  // ValueError naming a bad mode

struct GenerateRequest {
  std::vector<std::int64_t> prompt_token_ids;
  model_loader::SamplingParams params;
  bool logprobs = false;
};

struct VersionSpan {
  std::optional<std::string> version;
  std::int64_t start = 0;
  std::int64_t end = 0;
};

struct GenerateResult {
  std::vector<std::int64_t> token_ids;
  std::vector<double> logprobs;
  std::string finish_reason;
  std::vector<VersionSpan> weight_versions;

  nlohmann::json to_json(bool with_logprobs) const;
};

class GenerationScheduler {
 public:
  using VersionSource = std::function<std::optional<std::string>()>;

  GenerationScheduler(std::shared_ptr<const model_loader::LlamaModel> model, VersionSource version,
                      std::size_t max_batch = 32);
  ~GenerationScheduler();  // aborts what is in flight and joins the loop
  GenerationScheduler(const GenerationScheduler&) = delete;
  GenerationScheduler& operator=(const GenerationScheduler&) = delete;

  // Queues a request. ValueError for bad parameters, RuntimeError while the model is dirty.
  std::future<GenerateResult> submit(GenerateRequest request);

  // Returns once paused; `wait` blocks until the requests in flight finish (TimeoutError after
  // `timeout`).
  void pause(PauseMode mode, std::chrono::milliseconds timeout);
  void resume();
  bool is_paused() const;

  // Stops stepping (after the step in progress) until every hold is released.
  void hold();
  void release();

  std::size_t in_flight() const;

 private:
  struct Running {
    std::unique_ptr<model_loader::Sequence> sequence;
    std::promise<GenerateResult> promise;
    std::vector<VersionSpan> spans;
    bool logprobs = false;
  };

  void loop();
  void finish(Running& r);

  std::shared_ptr<const model_loader::LlamaModel> model_;
  VersionSource version_;
  std::size_t max_batch_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;     // the loop waits here for work
  std::condition_variable stepped_;  // pause/hold wait here for the loop
  std::deque<Running> waiting_;
  std::vector<Running> running_;
  bool paused_ = false;
  bool draining_ = false;  // pause(wait) in progress: admit nothing new
  int holds_ = 0;
  int interrupts_ = 0;  // pause() calls waiting for the step in progress
  bool stepping_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hotswap::worker
