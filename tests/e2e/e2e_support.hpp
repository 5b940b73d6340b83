// Helpers for the end-to-end suites: a source that dies part-way, and a bounded wait for a
// worker's session to end.
#pragma once

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <memory>
#include <thread>

#include "model_loader/model_test_support.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/tensor_digest.hpp"

namespace hotswap::testing {

// A trainer that stops mid-round: metadata announces the whole model, iteration yields only
// the first `keep` tensors.
class TruncatedSource final : public trainer_sdk::WeightSource {
 public:
  TruncatedSource(std::shared_ptr<trainer_sdk::TensorListSource> full, int keep)
      : full_(std::move(full)), keep_(keep) {}
  std::vector<protocol::ParamMeta> metadata() override { return full_->metadata(); }
  std::unique_ptr<trainer_sdk::WeightStream> iter() override {
    std::vector<std::pair<std::string, at::Tensor>> some;
    auto stream = full_->iter();
    for (int i = 0; i < keep_; ++i) {
      auto item = stream->next();
      some.emplace_back(item->name, item->tensor);
    }
    return trainer_sdk::TensorListSource(some).iter();
  }

 private:
  std::shared_ptr<trainer_sdk::TensorListSource> full_;
  int keep_;
};

// Checks, tensor by tensor, that the worker serves `expected`: its checkpoint-format digests
// against the checkpoint's own.
inline void verify_serves(trainer_sdk::ZmqWeightSyncClient& client, const CheckpointDir& expected) {
  auto served = client.call("weight_checker", {{"action", "checksum"}, {"format", "checkpoint"}});
  auto file = expected.open();
  for (const auto& name : file.names()) {
    BOOST_TEST(served["checksums"][name] == transport::sha256_hex(file.tensor(name)), name);
  }
}

// Polls the worker until its weight-update session has ended, for at most `timeout`.
inline bool wait_for_session_end(trainer_sdk::ZmqWeightSyncClient& client,
                                 std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (client.call("health")["weight_update_active"] == true) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

}  // namespace hotswap::testing
