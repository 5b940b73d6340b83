#include "trainer_sdk/fan_out_client.hpp"

#include <future>
#include <mutex>

#include "protocol/control_methods.hpp"
#include "protocol/errors.hpp"

namespace hotswap::trainer_sdk {

FanOutClient::FanOutClient(std::vector<std::shared_ptr<ZmqWeightSyncClient>> workers)
    : workers_(std::move(workers)) {
  if (workers_.empty()) throw protocol::ValueError("FanOutClient needs at least one worker");
}

void FanOutClient::each(const std::function<void(ZmqWeightSyncClient&)>& call) {
  std::vector<std::future<void>> calls;
  calls.reserve(workers_.size());
  for (auto& worker : workers_) {
    calls.push_back(std::async(std::launch::async, [&call, worker] { call(*worker); }));
  }
  // Every worker's call ends within its own timeout; wait for all, then report the first error.
  std::exception_ptr first;
  std::string where;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    try {
      calls[i].get();
    } catch (...) {
      if (!first) {
        first = std::current_exception();
        where = workers_[i]->endpoint();
      }
    }
  }
  if (!first) return;
  try {
    std::rethrow_exception(first);
  } catch (const protocol::Error& e) {
    protocol::throw_error(e.kind(), "worker " + where + ": " + e.what());
  } catch (const std::exception& e) {
    throw protocol::RuntimeError("worker " + where + ": " + e.what());
  }
}

void FanOutClient::init_weight_transfer_engine(const nlohmann::json& init_info) {
  each([&](ZmqWeightSyncClient& w) { w.init_weight_transfer_engine(init_info); });
}

void FanOutClient::start_weight_update() {
  each([](ZmqWeightSyncClient& w) { w.start_weight_update(); });
}

void FanOutClient::update_weights(const nlohmann::json& update_info) {
  each([&](ZmqWeightSyncClient& w) { w.update_weights(update_info); });
}

void FanOutClient::finish_weight_update(const std::optional<std::string>& weight_version) {
  each([&](ZmqWeightSyncClient& w) { w.finish_weight_update(weight_version); });
}

int FanOutClient::inference_world_size() const {
  int total = 0;
  for (const auto& worker : workers_) {
    const auto method = protocol::methods::kGetWorldSize;
    auto answer = worker->call(method, {{"include_dp", false}});
    const auto& size = reply_field(answer, worker->endpoint(), method, "world_size");
    if (!size.is_number_integer() || size.get<int>() < 1) {
      throw_bad_reply_field(answer, worker->endpoint(), method, "world_size", "a positive integer");
    }
    total += size.get<int>();
  }
  return total;
}

void FanOutClient::abort_and_shutdown_weight_transfer_engine() {
  each([](ZmqWeightSyncClient& w) { w.abort_and_shutdown_weight_transfer_engine(); });
}

void FanOutClient::shutdown_weight_transfer_engine() {
  each([](ZmqWeightSyncClient& w) { w.shutdown_weight_transfer_engine(); });
}

void FanOutClient::start_adapter_update(const AdapterTarget& adapter) {
  each([&](ZmqWeightSyncClient& w) { w.start_adapter_update(adapter); });
}

WeightSyncClient::WorkerDigests FanOutClient::checkpoint_checksums() {
  return gather([](ZmqWeightSyncClient& w) { return w.checkpoint_checksums(); });
}

WeightSyncClient::WorkerDigests FanOutClient::adapter_checksums(const std::string& lora_name) {
  return gather([&](ZmqWeightSyncClient& w) { return w.adapter_checksums(lora_name); });
}

WeightSyncClient::WorkerDigests FanOutClient::gather(
    const std::function<WorkerDigests(ZmqWeightSyncClient&)>& fetch) {
  std::vector<WorkerDigests> per_worker(workers_.size());
  std::mutex mutex;
  each([&](ZmqWeightSyncClient& w) {
    auto digests = fetch(w);
    std::lock_guard lock(mutex);
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      if (workers_[i].get() == &w) per_worker[i] = std::move(digests);
    }
  });
  WorkerDigests out;
  for (auto& d : per_worker)
    out.insert(out.end(), d.begin(), d.end());
  return out;
}

}  // namespace hotswap::trainer_sdk
