#include "model_loader/lora/lora_staging.hpp"

#include "protocol/errors.hpp"

namespace hotswap::model_loader {

LoraStaging::LoraStaging(const WeightMapping& mapping, c10::Device device, LoraConfig config,
                         std::set<std::string> required, Commit commit)
    : mapping_(mapping),
      device_(device),
      config_(std::move(config)),
      required_(std::move(required)),
      commit_(std::move(commit)) {}

void LoraStaging::load_weights(const std::vector<NamedTensor>& weights) {
  // Every tensor checked before any is staged: a refused batch leaves the round as it was.
  for (const auto& [name, tensor] : weights) {
    LoraAdapter::check_tensor(config_, name, tensor.sizes(), tensor.is_floating_point(), mapping_);
    if (!required_.empty() && !required_.contains(LoraAdapter::saved_name(name))) {
      throw protocol::ValueError(
          "`" + name +
          "` is not a tensor of the adapter this round replaces at its own config (it brings "
          "exactly the adapter's tensors; a round that changes what it adapts gives its "
          "`lora_config`)");
    }
  }
  for (const auto& [name, tensor] : weights) {
    // A copy (the engine's buffer is reused for the next tensors) in the dtype it came in, so
    // that the adapter's checksums are those of the trainer's tensors.
    staged_[LoraAdapter::saved_name(name)] = tensor.clone();
  }
}

void LoraStaging::start_reload() {
  staged_.clear();
}

void LoraStaging::finish_reload() {
  if (staged_.empty()) {
    throw protocol::ValueError("the adapter's round brought no tensor: nothing to serve");
  }
  std::vector<std::string> missing;
  for (const auto& name : required_) {
    if (!staged_.contains(name)) missing.push_back(name);
  }
  if (!missing.empty()) {
    throw protocol::ValueError(
        "the adapter's round brought " + std::to_string(required_.size() - missing.size()) +
        " of its " + std::to_string(required_.size()) + " tensors; missing `" + missing.front() +
        "`" + (missing.size() > 1 ? " and " + std::to_string(missing.size() - 1) + " more" : "") +
        " (an adapter is replaced whole)");
  }
  LoraAdapter::NamedTensors tensors(staged_.begin(), staged_.end());
  auto adapter = LoraAdapter::from_tensors(config_, tensors, mapping_, device_);
  staged_.clear();
  commit_(std::move(adapter));
}

void LoraStaging::abort_reload() {
  staged_.clear();
}

void LoraStaging::apply_patches(const std::vector<WeightPatch>& patches) {
  check_patches(patches);
}

void LoraStaging::check_patches(const std::vector<WeightPatch>&) const {
  throw protocol::ValueError(
      "a LoRA adapter's round takes whole tensors (a dense plane: gloo, shm, disk, nccl, ipc); "
      "sparse patches address the model's weights");
}

}  // namespace hotswap::model_loader
