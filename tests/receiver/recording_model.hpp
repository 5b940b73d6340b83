// A LoadableModel that records what it was given, for engine tests. It stands in for the real
// model of model_loader/ and is driven through the same interface.
#pragma once

#include <ATen/ops/empty.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model_loader/loadable_model.hpp"
#include "transport/torch_dtype.hpp"

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

  // With offer_slab, packed receives land in one slab, as the real model's staged copies do
  // (contiguous_destination): a tensor is recorded from it when it is marked received.
  std::optional<at::Tensor> contiguous_destination(const std::vector<protocol::ParamMeta>& tensors,
                                                   std::uint64_t) override {
    if (!offer_slab) return std::nullopt;
    slab_tensors_ = tensors;
    std::int64_t bytes = 0;
    for (const auto& t : tensors)
      bytes += static_cast<std::int64_t>(t.nbytes());
    slab_ = at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
    events.push_back("slab");
    return slab_;
  }
  void mark_received(const std::string& name) override {
    std::int64_t start = 0;
    for (const auto& t : slab_tensors_) {
      const auto bytes = static_cast<std::int64_t>(t.nbytes());
      if (t.name == name) {
        at::Tensor typed =
            at::empty(t.shape, at::TensorOptions().dtype(transport::to_scalar_type(t.dtype)));
        typed.view({-1}).view(at::kByte).copy_(slab_.narrow(0, start, bytes));
        loaded.emplace_back(name, typed);
        events.push_back("received " + name);
        return;
      }
      start += bytes;
    }
    LoadableModel::mark_received(name);  // refuses
  }

  bool offer_slab = false;
  std::vector<model_loader::NamedTensor> loaded;
  std::vector<std::string> events;

 private:
  std::vector<protocol::ParamMeta> slab_tensors_;
  at::Tensor slab_;
};

}  // namespace hotswap::testing
