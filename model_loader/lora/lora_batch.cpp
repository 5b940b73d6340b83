#include "model_loader/lora/lora_batch.hpp"

#include <ATen/ops/mm.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <map>

#include "model_loader/lora/lora_adapter.hpp"

namespace hotswap::model_loader {

LoraBatch::LoraBatch(const std::vector<ForwardSlice>& slices, c10::Device device) {
  // Rows by adapter, in the order adapters first appear (a fixed order of additions per step).
  std::vector<const LoraAdapter*> order;
  std::map<const LoraAdapter*, std::vector<std::int64_t>> rows;
  std::int64_t row = 0, total = 0;
  for (const auto& s : slices)
    total += s.num_tokens;
  for (const auto& s : slices) {
    if (s.lora != nullptr) {
      auto [it, added] = rows.try_emplace(s.lora);
      if (added) order.push_back(s.lora);
      for (std::int64_t i = 0; i < s.num_tokens; ++i)
        it->second.push_back(row + i);
    }
    row += s.num_tokens;
  }
  for (const LoraAdapter* adapter : order) {
    const auto& mine = rows[adapter];
    Group group{adapter, {}};
    // One adapter over the whole step needs no gather or scatter.
    if (static_cast<std::int64_t>(mine.size()) != total) {
      group.rows = at::tensor(mine, at::TensorOptions().dtype(at::kLong)).to(device);
    }
    groups_.push_back(std::move(group));
  }
}

void LoraBatch::add_updates(at::Tensor& y, const at::Tensor& x, std::size_t param) const {
  if (std::none_of(groups_.begin(), groups_.end(),
                   [&](const Group& g) { return g.adapter->pair(param) != nullptr; })) {
    return;
  }
  const auto dtype = y.scalar_type();
  at::Tensor sum = dtype == at::kFloat ? y : y.to(at::kFloat);
  const at::Tensor x32 = x.to(at::kFloat);  // once, not once per group
  for (const Group& g : groups_) {
    const LoraPair* pair = g.adapter->pair(param);
    if (pair == nullptr) continue;
    if (!g.rows.defined()) {
      sum.addmm_(at::mm(x32, pair->a_t), pair->b_t);  // the whole step: one fused add
      continue;
    }
    sum.index_add_(0, g.rows, at::mm(at::mm(x32.index_select(0, g.rows), pair->a_t), pair->b_t));
  }
  if (dtype != at::kFloat) y = sum.to(dtype);
}

}  // namespace hotswap::model_loader
