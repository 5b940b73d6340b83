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
//
// LoRA adapters likewise: each rank holds its own shard of an adapter (LoraAdapter lays it out
// as vLLM shards it) under an id this model gives it; the adapter rank 0 serves carries the id
// (share_lora_adapter), a step names each slice's adapter by it, and when rank 0's adapter goes
// the next step releases the id everywhere.
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
  // Every rank reads the adapter onto its shard; rank 0's is returned, carrying the id.
  std::shared_ptr<const model_loader::LoraAdapter> load_lora_adapter(
      const std::filesystem::path& directory, std::int64_t max_rank) const override;
  // Rank 0's layout: what an adapter's round on rank 0 is staged onto.
  const model_loader::WeightMapping* weight_mapping() const override {
    return shard_->weight_mapping();
  }

  // An adapter's round: a new id for the adapter every rank will build (each rank's round is
  // retargeted at a staging of its own, committing under this id), then rank 0's adapter, built
  // by its own staging, made to carry it. An id never shared is forgotten (forget_lora_id) and
  // released on the ranks that committed under it.
  std::uint64_t new_lora_id() const;
  std::shared_ptr<const model_loader::LoraAdapter> share_lora_adapter(
      std::shared_ptr<const model_loader::LoraAdapter> adapter, std::uint64_t id) const;
  void forget_lora_id(std::uint64_t id) const;
  // The ids let go since the last call, for the other ranks to let their shards go: sent with
  // each step, each adapter read from a path and each round's start.
  std::vector<std::uint64_t> take_released_loras() const;

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
  struct LoraIds;
  std::shared_ptr<LoraIds> lora_ids_;
};

}  // namespace hotswap::worker
