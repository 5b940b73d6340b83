#include "model_loader/weight_mapping.hpp"

#include <algorithm>

#include "protocol/errors.hpp"

namespace hotswap::model_loader {

std::size_t WeightMapping::add_param(std::string name, std::vector<std::int64_t> shape, int group,
                                     bool quantizable) {
  param_index_.emplace(name, params_.size());
  params_.push_back(RuntimeParam{std::move(name), std::move(shape), group, quantizable});
  param_slots_.emplace_back();
  return params_.size() - 1;
}

ShardRange TensorParallelRank::split(int dim, std::int64_t n) const {
  if (size == 1) return {};
  const std::int64_t part = n / size;
  return {dim, rank * part, part};
}

ShardRange TensorParallelRank::split_vocab(std::int64_t n) const {
  if (size == 1) return {};
  const std::int64_t part = n / size, longer = n % size;
  return {0, rank * part + std::min<std::int64_t>(rank, longer), part + (rank < longer ? 1 : 0)};
}

TensorParallelRank::Experts TensorParallelRank::local_experts(std::int64_t n) const {
  if (!expert_parallel || size == 1) return {0, n};
  const ShardRange r = split_vocab(n);  // the same linear placement
  return {r.start, r.size};
}

std::vector<std::int64_t> CheckpointSlot::kept_shape() const {
  std::vector<std::int64_t> kept = shape;
  if (!shard.whole()) kept[static_cast<std::size_t>(shard.dim)] = shard.size;
  return kept;
}

void WeightMapping::add_slot(std::string name, std::vector<std::int64_t> shape, std::size_t param,
                             std::int64_t row_offset, ShardRange shard) {
  int group = params_[param].group;
  slot_index_.emplace(name, slots_.size());
  group_slots_[group].push_back(slots_.size());
  param_slots_[param].push_back(slots_.size());
  slots_.push_back(
      CheckpointSlot{std::move(name), std::move(shape), param, row_offset, group, shard});
}

WeightMapping::WeightMapping(int num_groups) : num_groups_(num_groups) {
  group_slots_.resize(static_cast<std::size_t>(num_groups));
}

void WeightMapping::add_plain(const std::string& name, std::vector<std::int64_t> shape, int group,
                              bool quantizable, ShardRange shard) {
  std::vector<std::int64_t> kept = shape;
  if (!shard.whole()) kept[static_cast<std::size_t>(shard.dim)] = shard.size;
  std::size_t p = add_param(name, std::move(kept), group, quantizable);
  add_slot(name, std::move(shape), p, 0, shard);
}

void WeightMapping::add_skipped(std::string name) {
  skipped_.push_back(std::move(name));
}

const CheckpointSlot* WeightMapping::find(std::string_view checkpoint_name) const {
  auto it = slot_index_.find(checkpoint_name);
  return it == slot_index_.end() ? nullptr : &slots_[it->second];
}

bool WeightMapping::is_skipped(std::string_view name) const {
  if (name.ends_with("rotary_emb.inv_freq")) return true;
  return std::find(skipped_.begin(), skipped_.end(), name) != skipped_.end();
}

std::size_t WeightMapping::param_index(std::string_view runtime_name) const {
  auto it = param_index_.find(runtime_name);
  if (it == param_index_.end()) {
    throw protocol::ValueError("no runtime parameter '" + std::string(runtime_name) + "'");
  }
  return it->second;
}

}  // namespace hotswap::model_loader
