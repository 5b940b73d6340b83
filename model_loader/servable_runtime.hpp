// ServableRuntime: everything a served model does that does not depend on its architecture.
// It holds the runtime parameters (ParameterStore) laid out by the architecture's WeightMapping,
// and implements the weight side of ServableModel once for every architecture: checkpoint
// loading, layerwise reload sessions with their lock and dirty state, sparse patches, zeroing,
// both checksum formats, and the all-reduce a tensor-parallel rank's math needs.
//
// An architecture derives from it and supplies three things: its ModelConfig, the function
// that lays out its checkpoint (weight-mapping rules, in its *_family file), and `forward` over
// the parameters `store()` holds (looked up by runtime name through `mapping()`).
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "model_loader/parameter_store.hpp"
#include "model_loader/servable_model.hpp"
#include "model_loader/weight_mapping.hpp"

namespace hotswap::model_loader {

class ServableRuntime : public ServableModel {
 public:
  // An architecture's checkpoint layout on one tensor-parallel rank.
  using MappingRule = WeightMapping (*)(const ModelConfig&, TensorParallelRank);

  const ModelConfig& config() const final { return config_; }
  c10::ScalarType dtype() const final { return store_.dtype(); }
  std::uint64_t runtime_bytes() const final { return store_.nbytes(); }
  c10::Device device() const final { return store_.device(); }

  void load_checkpoint(const Checkpoint& checkpoint) final;

  // LoadableModel: a layerwise reload session. load_weights outside one is a RuntimeError.
  void load_weights(const std::vector<NamedTensor>& weights) final;
  void load_weights_from(const Checkpoint& checkpoint) final;
  void start_reload() final;
  void finish_reload() final;
  void abort_reload() final;
  void apply_patches(const std::vector<WeightPatch>& patches) final;
  void check_patches(const std::vector<WeightPatch>& patches) const final;
  // Staged sessions receive in place: the shadow rows of the tensor (see LayerwiseReload).
  std::optional<at::Tensor> destination_for(const std::string& name, c10::ScalarType dtype,
                                            c10::IntArrayRef shape) final;
  void mark_received(const std::string& name) final;
  std::optional<at::Tensor> contiguous_destination(const std::vector<protocol::ParamMeta>& tensors,
                                                   std::uint64_t scratch_limit) final;

  bool reload_active() const final;
  bool is_dirty() const final;
  void zero_weights() final;
  std::map<std::string, std::string> runtime_checksums(const std::string& key_prefix) const final;
  std::map<std::string, std::string> checkpoint_checksums() const final;
  const WeightMapping* weight_mapping() const final { return &mapping_; }

 protected:
  // A runtime with uninitialized weights, laid out by `mapping_rule` for this rank of
  // `options.tensor_parallel_group`; load_checkpoint or a complete reload fills them.
  ServableRuntime(ModelConfig config, ModelOptions options, MappingRule mapping_rule);

  const ModelOptions& options() const { return options_; }
  // The paged KV cache for blocks of `shape`, within options().kv_cache_memory_bytes (blocks
  // allocated as sequences grow), or on a GPU with options().gpu_kv_cache within what vLLM's
  // budget leaves once the weights are allocated, all of it allocated now (a ValueError naming
  // every share when that cannot hold one sequence of the context length).
  // `kernel_path_bytes`: what the GPU step path holds on the device besides (its graphs' pool,
  // workspaces and tables: KernelStepRunner::device_bytes), set aside by that budget.
  std::shared_ptr<KvBlockPool> make_kv_pool(const KvBlockShape& shape,
                                            std::uint64_t kernel_path_bytes = 0) const;
  const TensorParallelRank& tp() const { return tp_; }  // this rank of the tensor-parallel group
  const WeightMapping& mapping() const { return mapping_; }
  const ParameterStore& store() const { return store_; }
  // The runtime parameter a checkpoint-format runtime name maps to (a ValueError if none).
  std::size_t param(const std::string& runtime_name) const;

  // Sums `t` over the tensor-parallel ranks in place (float32 on the wire where the
  // communicator lacks the dtype); nothing at tp = 1. Collective; `t` holds the sum on return.
  void all_reduce(at::Tensor& t) const;
  // The same sum for a forward step, whose next kernels read `t` on the device: over NCCL the
  // host does not wait for it (Communicator::queue_all_reduce_sum). A step that queued any
  // calls finish_collectives() before it returns, and before anything that makes the host wait
  // for the stream (a copy to or from host memory): a dead peer then ends the step with a
  // TimeoutError after the collective timeout rather than leaving the host waiting forever.
  void queue_all_reduce(at::Tensor& t) const;
  void finish_collectives() const;

 private:
  // Records each mapped tensor's dtype as the checkpoint holds it (for checkpoint checksums).
  void note_checkpoint_dtypes(const Checkpoint& checkpoint);
  // A sparse patch checked and mapped onto its runtime parameter's flat positions.
  struct ResolvedPatch {
    const CheckpointSlot* slot;
    at::Tensor runtime_indices;
    at::Tensor values;
  };
  std::vector<ResolvedPatch> resolve_patches(const std::vector<WeightPatch>& patches) const;
  // Runs one load into the active session, marking the model dirty if it wrote live weights,
  // whether or not it throws.
  template <typename Load>
  void load_into_session(Load&& load);

  ModelConfig config_;
  ModelOptions options_;
  TensorParallelRank tp_;
  WeightMapping mapping_;
  ParameterStore store_;

  mutable std::mutex reload_mutex_;
  std::unique_ptr<LayerwiseReload> reload_;
  std::map<std::string, c10::ScalarType> checkpoint_dtypes_;  // as each tensor last arrived
  // Written under reload_mutex_, read without it: health and the scheduler ask for it while a
  // disk round holds the mutex for the whole checkpoint's load, and must not wait that out.
  std::atomic<bool> dirty_ = false;
  bool dirty_before_session_ = false;
};

}  // namespace hotswap::model_loader
