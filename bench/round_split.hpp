// Where a full sync's time goes, as the trainer sees it: each of the four calls timed on the
// trainer's side (start: the worker's start_weight_update; update: its receive, the opens and
// copies; finish: the commit, and for ipc the unmaps) and what the trainer does between them
// (exports, packing, waiting on its own stream or sends). An engine that broadcasts (gloo, nccl)
// sends its bytes while its update call is in flight, so there the update call's time holds the
// transfer's and "between" holds only what the trainer does before and after it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_support.hpp"
#include "trainer_sdk/weight_sync_client.hpp"

namespace hotswap::bench {

// A WeightSyncClient that times each of the four calls of a round.
class TimedClient : public trainer_sdk::WeightSyncClient {
 public:
  explicit TimedClient(std::shared_ptr<trainer_sdk::WeightSyncClient> inner)
      : inner_(std::move(inner)) {}

  void init_weight_transfer_engine(const nlohmann::json& init_info) override {
    inner_->init_weight_transfer_engine(init_info);
  }
  void start_weight_update() override {
    timed("start", [&] { inner_->start_weight_update(); });
  }
  void update_weights(const nlohmann::json& update_info) override {
    timed("update", [&] { inner_->update_weights(update_info); });
  }
  void finish_weight_update(const std::optional<std::string>& weight_version) override {
    timed("finish", [&] { inner_->finish_weight_update(weight_version); });
  }
  WorkerDigests checkpoint_checksums() override { return inner_->checkpoint_checksums(); }
  void shutdown_weight_transfer_engine() override { inner_->shutdown_weight_transfer_engine(); }
  void abort_and_shutdown_weight_transfer_engine() override {
    inner_->abort_and_shutdown_weight_transfer_engine();
  }

  // Seconds in each call since the last take, by call; cleared.
  std::map<std::string, double> take() {
    std::lock_guard lock(mutex_);
    return std::exchange(seconds_, {});
  }

 private:
  template <class Call>
  void timed(const std::string& name, Call call) {
    auto t = Clock::now();
    call();
    std::lock_guard lock(mutex_);  // an engine may call from a thread of its own
    seconds_[name] += since(t);
  }
  std::shared_ptr<trainer_sdk::WeightSyncClient> inner_;
  std::mutex mutex_;
  std::map<std::string, double> seconds_;
};

// The split of repeated rounds: each call's milliseconds and the trainer's between them.
class RoundSplit {
 public:
  // One round of `round_seconds`, its calls as `client` timed them since the last take.
  void add(TimedClient& client, double round_seconds) {
    double in_calls = 0;
    for (const auto& [name, seconds] : client.take()) {
      ms_[name + " call"].push_back(seconds * 1e3);
      in_calls += seconds;
    }
    ms_["trainer between calls"].push_back((round_seconds - in_calls) * 1e3);
  }
  // One line per part, "<prefix> round, <part>": the median ms with the range.
  void report(const std::string& bench, const std::string& prefix,
              const nlohmann::json& extra = {}) const {
    for (const auto& [part, ms] : ms_)
      report_spread(bench, prefix + " round, " + part, ms, "ms", extra);
  }

 private:
  std::map<std::string, std::vector<double>> ms_;
};

}  // namespace hotswap::bench
