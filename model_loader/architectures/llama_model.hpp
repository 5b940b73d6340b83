// LlamaModel: the math of the Llama family of causal LMs (Llama, Mistral, Qwen2, Qwen3, and the
// mixtures of experts Qwen3-MoE and Mixtral) in libtorch, over vLLM's runtime layout (fused
// qkv_proj and gate_up_proj, experts fused into w13 and w2, tied lm_head when configured):
// batched forward steps over KV caches, composed of the shared blocks of model_loader/blocks/.
// The weights, their reloads and checksums are the ServableRuntime's.
// llama_family.hpp has the family's names, config.json rules and checkpoint layout.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model_loader/architectures/llama_family.hpp"
#include "model_loader/blocks/block_context.hpp"
#include "model_loader/blocks/kernel_step_runner.hpp"
#include "model_loader/blocks/rotary_embedding.hpp"
#include "model_loader/blocks/self_attention.hpp"
#include "model_loader/blocks/sparse_moe.hpp"
#include "model_loader/kv_block_pool.hpp"
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
  std::string step_path() const override { return step_path_; }
  // The GPU's step path (or its stand-in); null where every step takes libtorch's ops.
  const KernelStepRunner* kernel_step_runner() const { return kernel_runner_.get(); }

 private:
  // Whether the kernel path takes this model's steps (options().step_kernels); where it does
  // not, step_path_ says why, and where it was required, a ValueError does.
  bool choose_step_path();
  void start_kernel_path();                       // after the KV pool
  kernels::StepKernelShape kernel_shape() const;  // without its rotary table
  kernels::CudaGraphSizes graph_sizes() const;
  // The layers over the step kernels: KernelStepRunner's Body.
  at::Tensor kernel_forward(const at::Tensor& ids, const kernels::KernelStepInputs& step,
                            const at::Tensor& returned) const;

  HeadSplit heads_;   // this rank's query and KV heads
  ShardRange vocab_;  // this rank's vocabulary rows of embed_tokens and lm_head
  c10::ScalarType compute_dtype_;
  // Attention's two matmuls: float32 on the CPU, where a bfloat16 batched matmul rounds more
  // than transformers' does; compute_dtype_ elsewhere.
  c10::ScalarType attention_dtype_;
  PagedAttentionLimits attention_limits_;  // this rank's heads, the budget of one batched call
  std::shared_ptr<KvBlockPool> kv_pool_;   // every sequence's keys and values, in blocks
  RotaryEmbedding rope_;
  BlockContext blocks_;  // what the shared blocks read: the store, the rank, the collectives

  // A layer's runtime parameters; kNoParam for those it does not have (a sparse layer has a
  // router and fused experts in place of gate_up and down).
  struct LayerParams {
    std::size_t input_norm;
    SelfAttentionParams attention;
    std::size_t post_norm, gate_up, down;
    SparseMoeParams experts;
  };
  std::vector<LayerParams> layers_;
  std::size_t embed_, final_norm_, lm_head_;
  std::unique_ptr<KernelStepRunner> kernel_runner_;
  std::string step_path_ = "libtorch";
  LoraBatch no_lora_;  // the kernel path's steps have no adapter
};

}  // namespace hotswap::model_loader
