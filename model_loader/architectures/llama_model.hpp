// LlamaModel: the Llama family of causal LMs (Llama, Mistral, Qwen2, Qwen3, and the mixtures of
// experts Qwen3-MoE and Mixtral) in libtorch with vLLM's runtime layout (fused qkv_proj and
// gate_up_proj, experts fused into w13 and w2, tied lm_head when configured), a KV cache, batched
// forward steps, and layerwise reload of checkpoint-format weights while it serves.
// llama_family.hpp has the family's names, config.json rules and checkpoint layout.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model_loader/architectures/llama_family.hpp"
#include "model_loader/parameter_store.hpp"
#include "model_loader/servable_model.hpp"
#include "model_loader/weight_mapping.hpp"

namespace hotswap::model_loader {

class LlamaModel final : public ServableModel {
 public:
  // A model with uninitialized weights; load_checkpoint or a complete reload fills them.
  LlamaModel(ModelConfig config, ModelOptions options);

  const ModelConfig& config() const override { return config_; }
  c10::ScalarType dtype() const override { return store_.dtype(); }
  std::uint64_t runtime_bytes() const override { return store_.nbytes(); }

  void load_checkpoint(const Checkpoint& checkpoint) override;

  // LoadableModel: a layerwise reload session. load_weights outside one is a RuntimeError.
  void load_weights(const std::vector<NamedTensor>& weights) override;
  void load_weights_from(const Checkpoint& checkpoint) override;
  void start_reload() override;
  void finish_reload() override;
  void abort_reload() override;
  void apply_patches(const std::vector<WeightPatch>& patches) override;
  void check_patches(const std::vector<WeightPatch>& patches) const override;
  // Staged sessions receive in place: the shadow rows of the tensor (see LayerwiseReload).
  std::optional<at::Tensor> destination_for(const std::string& name, c10::ScalarType dtype,
                                            c10::IntArrayRef shape) override;
  void mark_received(const std::string& name) override;
  c10::Device device() const override { return store_.device(); }

  // ServableModel
  bool reload_active() const override;
  bool is_dirty() const override;
  at::Tensor forward(const at::Tensor& tokens, std::vector<ForwardSlice>& slices,
                     bool all_positions = false) const override;
  void zero_weights() override;
  std::map<std::string, std::string> runtime_checksums(
      const std::string& key_prefix) const override;
  std::map<std::string, std::string> checkpoint_checksums() const override;

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

  // x Wᵀ in x's dtype, or in `out` (the logits: float32, never rounded to bfloat16 first).
  at::Tensor linear(const at::Tensor& x, std::size_t param,
                    std::optional<c10::ScalarType> out = std::nullopt) const;
  // linear(x, param) + bias (kNone: none), rounded once.
  at::Tensor linear_with_bias(const at::Tensor& x, std::size_t param, std::size_t bias) const;
  // A row-parallel layer (o_proj, down_proj): each rank's partial product in float32, summed
  // over the ranks, then the bias, rounded once. linear_with_bias at tp = 1.
  at::Tensor row_parallel(const at::Tensor& x, std::size_t param, std::size_t bias) const;
  // Sums `t` over the tensor-parallel ranks in place (float32 on the wire where the
  // communicator lacks the dtype); nothing at tp = 1.
  void all_reduce(at::Tensor& t) const;
  // Vocab-parallel lookups: the embeddings of `ids` [N] and the logits [N, vocab] of `h`, each
  // rank filling its vocabulary rows and the ranks summing.
  at::Tensor embed(const at::Tensor& ids) const;
  at::Tensor logits(const at::Tensor& h) const;
  at::Tensor rms_norm(const at::Tensor& x, std::size_t param) const;
  // cos and sin of the rotary angles at `positions`, [N, 1, head_dim] in the compute dtype.
  std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& positions) const;

  ModelConfig config_;
  ModelOptions options_;
  TensorParallelRank tp_;
  HeadSplit heads_;  // this rank's query and KV heads
  WeightMapping mapping_;
  ShardRange vocab_;  // this rank's vocabulary rows of embed_tokens and lm_head
  ParameterStore store_;
  c10::ScalarType compute_dtype_;
  // Attention's two matmuls: float32 on the CPU, where libtorch 1.13's bfloat16 batched matmul
  // is a slow scalar loop that rounds more than transformers' does; compute_dtype_ elsewhere.
  c10::ScalarType attention_dtype_;
  at::Tensor inv_freq_;  // float32 [head_dim / 2], on the model's device

  // A layer's runtime parameters; kNone for those it does not have (a sparse layer has a router
  // and fused experts in place of gate_up and down).
  struct LayerParams {
    std::size_t input_norm, qkv, qkv_bias, o, o_bias, q_norm, k_norm, post_norm, gate_up, down;
    std::size_t router, w13, w2;
  };
  // A sparse layer's MLP on the normalized hidden states `x` [tokens, hidden].
  at::Tensor experts(const at::Tensor& x, const LayerParams& p) const;
  std::vector<LayerParams> layers_;
  std::size_t embed_, final_norm_, lm_head_;
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  mutable std::mutex reload_mutex_;
  std::unique_ptr<LayerwiseReload> reload_;
  std::map<std::string, c10::ScalarType> checkpoint_dtypes_;  // as each tensor last arrived
  bool dirty_ = false;
  bool dirty_before_session_ = false;
};

}  // namespace hotswap::model_loader
