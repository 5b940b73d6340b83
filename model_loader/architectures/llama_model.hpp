// LlamaModel: the math of the Llama family of causal LMs (Llama, Mistral, Qwen2, Qwen3, and the
// mixtures of experts Qwen3-MoE and Mixtral) in libtorch, over vLLM's runtime layout (fused
// qkv_proj and gate_up_proj, experts fused into w13 and w2, tied lm_head when configured):
// batched forward steps over KV caches. The weights, their reloads and checksums are the
// ServableRuntime's.
// llama_family.hpp has the family's names, config.json rules and checkpoint layout.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model_loader/architectures/llama_family.hpp"
#include "model_loader/kv_block_pool.hpp"
#include "model_loader/lora/lora_batch.hpp"
#include "model_loader/paged_attention.hpp"
#include "model_loader/servable_runtime.hpp"

namespace hotswap::model_loader {

class LlamaModel final : public ServableRuntime {
 public:
  // A model with uninitialized weights; load_checkpoint or a complete reload fills them.
  LlamaModel(ModelConfig config, ModelOptions options);

  at::Tensor forward(const at::Tensor& tokens, std::vector<ForwardSlice>& slices,
                     bool all_positions = false) const override;
  const KvBlockPool* kv_pool() const override { return kv_pool_.get(); }

 private:
  // x Wᵀ in x's dtype, or in `out` (the logits: float32, never rounded to bfloat16 first).
  at::Tensor linear(const at::Tensor& x, std::size_t param,
                    std::optional<c10::ScalarType> out = std::nullopt) const;
  // linear(x, param) + bias (kNone: none), rounded once; then the step's LoRA updates.
  at::Tensor linear_with_bias(const at::Tensor& x, std::size_t param, std::size_t bias,
                              const LoraBatch& lora) const;
  // A row-parallel layer (o_proj, down_proj): each rank's partial product in float32 with its
  // partial LoRA update, summed over the ranks, then the bias, rounded once. linear_with_bias
  // at tp = 1.
  at::Tensor row_parallel(const at::Tensor& x, std::size_t param, std::size_t bias,
                          const LoraBatch& lora) const;
  // Vocab-parallel lookups: the embeddings of `ids` [N] and the logits [N, vocab] of `h`, each
  // rank filling its vocabulary rows and the ranks summing.
  at::Tensor embed(const at::Tensor& ids) const;
  at::Tensor logits(const at::Tensor& h) const;
  at::Tensor rms_norm(const at::Tensor& x, std::size_t param) const;
  // cos and sin of the rotary angles at `positions`, [N, 1, head_dim] in the compute dtype.
  std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& positions) const;

  HeadSplit heads_;   // this rank's query and KV heads
  ShardRange vocab_;  // this rank's vocabulary rows of embed_tokens and lm_head
  c10::ScalarType compute_dtype_;
  // Attention's two matmuls: float32 on the CPU, where a bfloat16 batched matmul rounds more
  // than transformers' does; compute_dtype_ elsewhere.
  c10::ScalarType attention_dtype_;
  PagedAttentionLimits attention_limits_;  // this rank's heads, the budget of one batched call
  at::Tensor inv_freq_;                    // float32 [head_dim / 2], on the model's device
  std::shared_ptr<KvBlockPool> kv_pool_;   // every sequence's keys and values, in blocks

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
};

}  // namespace hotswap::model_loader
