// LoraStaging: a LoadableModel that receives a LoRA adapter instead of base weights, so that a
// receive engine can move an adapter through the weight-transfer contract as it moves a model
// (its update target retargeted at this, WeightTransferEngine::set_weight_update_target). Each
// tensor is checked as it arrives (LoraAdapter::check_tensor: PEFT's names, a live PEFT model's
// included, and shapes at the adapter's rank) and staged as it came; finish_reload builds the
// adapter and hands it to `commit`, and nothing is served from it before. A round that replaces
// an adapter must bring every tensor that adapter has: a partial one would silently stop
// adapting what it left out. abort_reload drops what was staged.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model_loader/loadable_model.hpp"
#include "model_loader/lora/lora_adapter.hpp"

namespace hotswap::model_loader {

class LoraStaging final : public LoadableModel {
 public:
  using Commit = std::function<void(std::shared_ptr<const LoraAdapter>)>;

  // Stages an adapter of `config` laid onto `mapping` (which must outlive it) on `device`.
  // `required`: the saved names of every tensor the round must bring, and of the only ones it
  // may (the adapter it replaces, at its config); empty: whatever arrives is the adapter.
  LoraStaging(const WeightMapping& mapping, c10::Device device, LoraConfig config,
              std::set<std::string> required, Commit commit);

  // ValueError naming the tensor for one the adapter cannot hold, before anything is staged.
  void load_weights(const std::vector<NamedTensor>& weights) override;
  void start_reload() override;
  // Builds the adapter from what was staged and commits it; a ValueError naming what is missing
  // (nothing committed) when a tensor `required` never arrived, or when nothing did.
  void finish_reload() override;
  void abort_reload() override;
  // Refused by name: an adapter is replaced whole, and sparse patches address a model's weights.
  void apply_patches(const std::vector<WeightPatch>& patches) override;
  void check_patches(const std::vector<WeightPatch>& patches) const override;
  c10::Device device() const override { return device_; }

  // Tensors staged so far.
  std::size_t staged() const { return staged_.size(); }

 private:
  const WeightMapping& mapping_;
  c10::Device device_;
  LoraConfig config_;
  std::set<std::string> required_;
  Commit commit_;
  std::map<std::string, at::Tensor> staged_;  // by saved name
};

}  // namespace hotswap::model_loader
