#include "worker/parallel/tensor_parallel_model.hpp"

#include <ATen/ops/tensor.h>

#include <functional>
#include <map>

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

// The ids of the adapters every rank holds, by rank 0's adapter; an id whose adapter went (or
// that was never shared) is queued for release, and the next step tells the other ranks.
struct TensorParallelModel::LoraIds {
  std::mutex mutex;
  std::uint64_t next = 1;
  std::map<const model_loader::LoraAdapter*, std::uint64_t> by_adapter;
  std::vector<std::uint64_t> released;
};

namespace {
// Rank 0's adapter, and its id on the other ranks: the pointer that serves is the adapter's
// own (an aliasing shared_ptr), and when the last one goes, so does the id.
struct SharedLora {
  std::shared_ptr<const model_loader::LoraAdapter> adapter;
  std::uint64_t id = 0;
  std::function<void(const model_loader::LoraAdapter*, std::uint64_t)> release;
  ~SharedLora() { release(adapter.get(), id); }
};

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
      cache_ids_(std::make_shared<CacheIds>()),
      lora_ids_(std::make_shared<LoraIds>()) {}

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
    json slice = {{"cache", tag.id}, {"length", s.cache->length}, {"tokens", s.num_tokens}};
    if (s.lora != nullptr) {
      std::lock_guard ids(lora_ids_->mutex);
      auto id = lora_ids_->by_adapter.find(s.lora);
      if (id == lora_ids_->by_adapter.end()) {
        throw protocol::RuntimeError(
            "a sequence runs through a LoRA adapter the other tensor-parallel ranks do not hold");
      }
      slice["lora"] = id->second;
    }
    slice_list.push_back(std::move(slice));
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
                 {"released", released},
                 {"released_loras", take_released_loras()}};
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
    const std::filesystem::path& directory, std::int64_t max_rank) const {
  const std::uint64_t id = new_lora_id();
  std::shared_ptr<const model_loader::LoraAdapter> mine;
  try {
    // Every rank reads it at once; a rank that cannot refuses as rank 0 would (the same file).
    collective(rank_methods::kLoadLoraAdapter,
               {{"path", directory.string()},
                {"max_rank", max_rank},
                {"id", id},
                {"released_loras", take_released_loras()}},
               [&] { mine = shard_->load_lora_adapter(directory, max_rank); });
  } catch (...) {
    forget_lora_id(id);  // the ranks that read it let it go
    throw;
  }
  return share_lora_adapter(std::move(mine), id);
}

std::uint64_t TensorParallelModel::new_lora_id() const {
  std::lock_guard ids(lora_ids_->mutex);
  return lora_ids_->next++;
}

std::shared_ptr<const model_loader::LoraAdapter> TensorParallelModel::share_lora_adapter(
    std::shared_ptr<const model_loader::LoraAdapter> adapter, std::uint64_t id) const {
  auto shared = std::make_shared<SharedLora>();
  shared->adapter = std::move(adapter);
  shared->id = id;
  shared->release = [ids = std::weak_ptr<LoraIds>(lora_ids_)](const model_loader::LoraAdapter* gone,
                                                              std::uint64_t gone_id) {
    if (auto live = ids.lock()) {
      std::lock_guard guard(live->mutex);
      live->by_adapter.erase(gone);
      live->released.push_back(gone_id);
    }
  };
  {
    std::lock_guard ids(lora_ids_->mutex);
    lora_ids_->by_adapter[shared->adapter.get()] = id;
  }
  const model_loader::LoraAdapter* served = shared->adapter.get();
  return {std::move(shared), served};
}

void TensorParallelModel::forget_lora_id(std::uint64_t id) const {
  std::lock_guard ids(lora_ids_->mutex);
  lora_ids_->released.push_back(id);
}

std::vector<std::uint64_t> TensorParallelModel::take_released_loras() const {
  std::vector<std::uint64_t> released;
  std::lock_guard ids(lora_ids_->mutex);
  released.swap(lora_ids_->released);
  return released;
}

}  // namespace hotswap::worker
