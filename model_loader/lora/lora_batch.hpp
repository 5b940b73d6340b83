// LoraBatch: which rows of one forward step each LoRA adapter applies to, made once per step
// from its slices, and the updates it adds to an adapted layer's output. A batch may mix
// sequences of several adapters and of the base model: each adapter's update is computed on its
// own rows only (x Aᵀ Bᵀ per group, never merged into the base weights), so a sequence's output
// is the same whatever shares its batch.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "model_loader/servable_model.hpp"

namespace hotswap::model_loader {

class LoraBatch {
 public:
  // The groups of `slices` (their tokens in slice order, as the step lays them out) by adapter,
  // with their row indices on `device`; none when no slice has one.
  LoraBatch(const std::vector<ForwardSlice>& slices, c10::Device device);

  bool empty() const { return groups_.empty(); }
  // Adds to y [rows, out], the output of runtime parameter `param` for x [rows, in], each
  // group's update of its rows: in float32, y rounded back to its dtype once after. Nothing for
  // a parameter no adapter of the batch adapts.
  void add_updates(at::Tensor& y, const at::Tensor& x, std::size_t param) const;

 private:
  struct Group {
    const LoraAdapter* adapter;
    at::Tensor rows;  // int64 on the device; undefined when the group is every row of the step
  };
  std::vector<Group> groups_;
};

}  // namespace hotswap::model_loader
