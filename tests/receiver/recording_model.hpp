// A LoadableModel that records what it was given, for engine tests. It stands in for the real
// model of model_loader/ and is driven through the same interface.
#pragma once

#include <string>
#include <vector>

#include "model_loader/loadable_model.hpp"

namespace hotswap::testing {

class RecordingModel : public model_loader::LoadableModel {
 public:
  void load_weights(const std::vector<model_loader::NamedTensor>& weights) override {
    for (const auto& w : weights) {
      // Copied, as the real model copies: engines may reuse their receive buffers.
      loaded.emplace_back(w.first, w.second.clone());
      events.push_back("load " + w.first);
    }
  }
  void start_reload() override { events.push_back("start_reload"); }
  void finish_reload() override { events.push_back("finish_reload"); }
  void abort_reload() override { events.push_back("abort_reload"); }
  c10::Device device() const override { return c10::Device(c10::kCPU); }

  std::vector<model_loader::NamedTensor> loaded;
  std::vector<std::string> events;
};

}  // namespace hotswap::testing
