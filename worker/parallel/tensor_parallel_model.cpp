#include "worker/parallel/tensor_parallel_model.hpp"

#include <ATen/ops/tensor.h>

#include "protocol/errors.hpp"
#include "worker/parallel/rank_methods.hpp"

namespace hotswap::worker {

using model_loader::checked_step_tokens;
using nlohmann::json;
using Channel = TensorParallelGroup::Channel;

// Ids of the caches the other ranks hold copies of; a cache's tag, when it goes, queues its id
// for release, and the next step tells the other ranks.
struct TensorParallelModel::CacheIds {
  std::mutex mutex;
  std::uint64_t next = 1;
  std::vector<std::uint64_t> released;
};

namespace {
// Held by a KvCache (peer_tag): its id, queued for release on every rank when the cache goes.
struct CacheTag {
  std::uint64_t id = 0;
  std::function<void(std::uint64_t)> release;
  ~CacheTag() { release(id); }
};
}  // namespace

TensorParallelModel::TensorParallelModel(std::shared_ptr<model_loader::ServableModel> shard,
                                         std::shared_ptr<TensorParallelGroup> group)
    : shard_(std::move(shard)),
      group_(std::move(group)),
      cache_ids_(std::make_shared<CacheIds>()) {}

TensorParallelModel::~TensorParallelModel() = default;

std::vector<json> TensorParallelModel::collective(std::string_view method, const json& params,
                                                  const std::function<void()>& local) const {
  std::lock_guard lock(group_->lock(Channel::kModel));
  return group_->call_all(Channel::kModel, method, params, local);
}

void TensorParallelModel::between_steps(const std::function<void()>& fn) {
  std::lock_guard lock(group_->lock(Channel::kModel));
  fn();
}

at::Tensor TensorParallelModel::forward(const at::Tensor& tokens,
                                        std::vector<model_loader::ForwardSlice>& slices,
                                        bool all_positions) const {
  // Bad input is refused here, before any rank is asked to step: a step that fails on another
  // rank stops that rank (its caches would no longer match rank 0's).
  const at::Tensor token_ids =
      checked_step_tokens(tokens, slices, shard_->config().vocab_size).contiguous().to(at::kCPU);
  json slice_list = json::array();
  for (auto& s : slices) {
    if (!s.cache->peer_tag) {
      std::uint64_t id;
      {
        std::lock_guard ids(cache_ids_->mutex);
        id = cache_ids_->next++;
      }
      auto tag = std::make_shared<CacheTag>();
      tag->id = id;
      tag->release = [ids = std::weak_ptr<CacheIds>(cache_ids_)](std::uint64_t gone) {
        if (auto live = ids.lock()) {
          std::lock_guard guard(live->mutex);
          live->released.push_back(gone);
        }
      };
      s.cache->peer_tag = tag;
    }
    const auto& tag = *static_cast<const CacheTag*>(s.cache->peer_tag.get());
    slice_list.push_back(
        {{"cache", tag.id}, {"length", s.cache->length}, {"tokens", s.num_tokens}});
  }
  std::vector<std::uint64_t> released;
  {
    std::lock_guard ids(cache_ids_->mutex);
    released.swap(cache_ids_->released);
  }
  std::vector<std::int64_t> id_list(token_ids.data_ptr<std::int64_t>(),
                                    token_ids.data_ptr<std::int64_t>() + token_ids.numel());
  json params = {{"tokens", id_list},
                 {"slices", slice_list},
                 {"all_positions", all_positions},
                 {"released", released}};
  at::Tensor logits;
  collective(rank_methods::kForward, params,
             [&] { logits = shard_->forward(tokens, slices, all_positions); });
  return logits;
}

void TensorParallelModel::zero_weights() {
  collective(rank_methods::kZeroWeights, json::object(), [&] { shard_->zero_weights(); });
}

std::map<std::string, std::string> TensorParallelModel::runtime_checksums(
    const std::string& key_prefix) const {
  std::map<std::string, std::string> sums;
  auto answers = collective(rank_methods::kRuntimeChecksums, {{"key_prefix", key_prefix}},
                            [&] { sums = shard_->runtime_checksums(key_prefix); });
  for (const auto& answer : answers) {
    for (const auto& [key, hex] : answer.at("checksums").items())
      sums[key] = hex.get<std::string>();
  }
  return sums;
}

std::map<std::string, std::string> TensorParallelModel::checkpoint_checksums() const {
  std::map<std::string, std::string> sums;
  // Every rank puts each sharded tensor back together with the others; all come to one answer.
  collective(rank_methods::kCheckpointChecksums, json::object(),
             [&] { sums = shard_->checkpoint_checksums(); });
  return sums;
}

std::uint64_t TensorParallelModel::runtime_bytes() const {
  // The ranks' shards are the same size but for the vocabulary rows, which differ by one.
  return shard_->runtime_bytes() * static_cast<std::uint64_t>(group_->size());
}

void TensorParallelModel::load_checkpoint(const model_loader::Checkpoint& checkpoint) {
  shard_->load_checkpoint(checkpoint);
}

void TensorParallelModel::load_weights(const std::vector<model_loader::NamedTensor>& weights) {
  shard_->load_weights(weights);
}

void TensorParallelModel::load_weights_from(const model_loader::Checkpoint& checkpoint) {
  shard_->load_weights_from(checkpoint);
}

std::optional<at::Tensor> TensorParallelModel::destination_for(const std::string& name,
                                                               c10::ScalarType dtype,
                                                               c10::IntArrayRef shape) {
  return shard_->destination_for(name, dtype, shape);
}

std::optional<at::Tensor> TensorParallelModel::contiguous_destination(
    const std::vector<protocol::ParamMeta>& tensors, std::uint64_t scratch_limit) {
  return shard_->contiguous_destination(tensors, scratch_limit);
}

void TensorParallelModel::mark_received(const std::string& name) {
  shard_->mark_received(name);
}

void TensorParallelModel::apply_patches(const std::vector<model_loader::WeightPatch>& patches) {
  shard_->apply_patches(patches);
}

void TensorParallelModel::check_patches(
    const std::vector<model_loader::WeightPatch>& patches) const {
  shard_->check_patches(patches);
}

std::shared_ptr<const model_loader::LoraAdapter> TensorParallelModel::load_lora_adapter(
    const std::filesystem::path& directory, std::int64_t /*max_rank*/) const {
  throw protocol::ValueError("cannot serve the LoRA adapter in " + directory.string() +
                             ": LoRA adapters are not served with --tensor-parallel-size above 1 "
                             "yet");
}

}  // namespace hotswap::worker
