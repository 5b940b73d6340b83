// TensorParallelModel: rank 0's face of a tensor-parallel model. The scheduler, the weight
// checker and health see one ServableModel; underneath, each collective call (a forward step,
// checkpoint checksums, a reset) is sent to every other rank on its model channel and run on
// rank 0's own shard at the same time, and the answers are collected after (the shards'
// all-reduces keep the ranks in step). One collective call runs at a time: every rank meets
// them in the same order. The LoadableModel calls go to rank 0's shard alone; each rank's own
// receive engine loads its own shard.
//
// The other ranks keep a copy of each sequence's KV cache (their heads of it), named by an id
// this model gives the cache on its first step; the id is forgotten everywhere when the cache
// goes or is cleared (KvCache::peer_tag: a cleared cache comes back under a new id), and each
// step carries the caches' lengths, which the other ranks check against theirs.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "model_loader/servable_model.hpp"
#include "worker/parallel/tensor_parallel_group.hpp"

namespace hotswap::worker {

class TensorParallelModel final : public model_loader::ServableModel {
 public:
  TensorParallelModel(std::shared_ptr<model_loader::ServableModel> shard,
                      std::shared_ptr<TensorParallelGroup> group);
  ~TensorParallelModel() override;

  // Runs `fn` between two collective calls: no rank steps while it runs (a commit on every
  // rank lands between the same two steps).
  void between_steps(const std::function<void()>& fn);

  // ServableModel
  const model_loader::ModelConfig& config() const override { return shard_->config(); }
  c10::ScalarType dtype() const override { return shard_->dtype(); }
  std::uint64_t runtime_bytes() const override;
  void load_checkpoint(const model_loader::Checkpoint& checkpoint) override;
  bool reload_active() const override { return shard_->reload_active(); }
  // Dirty when any rank's shard is (inplace: a round that failed part-way on that rank).
  bool is_dirty() const override { return shard_->is_dirty() || group_->peers_dirty(); }
  at::Tensor forward(const at::Tensor& tokens, std::vector<model_loader::ForwardSlice>& slices,
                     bool all_positions = false) const override;
  void zero_weights() override;
  std::map<std::string, std::string> runtime_checksums(
      const std::string& key_prefix) const override;
  std::map<std::string, std::string> checkpoint_checksums() const override;
  // Not yet: each rank's shard lays an adapter out (LoraAdapter shards it as vLLM does), but
  // the ranks' channel carries no adapter to load nor which one a step's sequences use.
  std::shared_ptr<const model_loader::LoraAdapter> load_lora_adapter(
      const std::filesystem::path& directory, std::int64_t max_rank) const override;

  // LoadableModel: rank 0's shard.
  void load_weights(const std::vector<model_loader::NamedTensor>& weights) override;
  void load_weights_from(const model_loader::Checkpoint& checkpoint) override;
  std::optional<at::Tensor> destination_for(const std::string& name, c10::ScalarType dtype,
                                            c10::IntArrayRef shape) override;
  void mark_received(const std::string& name) override;
  std::optional<at::Tensor> contiguous_destination(const std::vector<protocol::ParamMeta>& tensors,
                                                   std::uint64_t scratch_limit) override;
  void start_reload() override { shard_->start_reload(); }
  void finish_reload() override { shard_->finish_reload(); }
  void abort_reload() override { shard_->abort_reload(); }
  void apply_patches(const std::vector<model_loader::WeightPatch>& patches) override;
  void check_patches(const std::vector<model_loader::WeightPatch>& patches) const override;
  c10::Device device() const override { return shard_->device(); }
  // Rank 0's: every rank's has the same budget in blocks and takes the same blocks' worth.
  const model_loader::KvBlockPool* kv_pool() const override { return shard_->kv_pool(); }

 private:
  // TensorParallelGroup::call_all on the model channel, under its lock: one collective call at
  // a time.
  std::vector<nlohmann::json> collective(std::string_view method, const nlohmann::json& params,
                                         const std::function<void()>& local) const;

  std::shared_ptr<model_loader::ServableModel> shard_;
  std::shared_ptr<TensorParallelGroup> group_;
  struct CacheIds;
  std::shared_ptr<CacheIds> cache_ids_;
};

}  // namespace hotswap::worker
