#include "model_loader/architectures/llama_model.hpp"

#include <ATen/TensorOperators.h>

#include <algorithm>
#include <vector>

#include "model_loader/blocks/gated_mlp.hpp"
#include "model_loader/blocks/rms_norm.hpp"
#include "model_loader/blocks/step_inputs.hpp"
#include "model_loader/blocks/vocab_parallel.hpp"

namespace hotswap::model_loader {

std::shared_ptr<ServableModel> create_llama_model(const ModelConfig& config,
                                                  const ModelOptions& options) {
  return std::make_shared<LlamaModel>(config, options);
}

namespace {

// float16 computes in float32 on the CPU (keeping float16 storage), where half-precision matmuls
// are slow or missing.
c10::ScalarType compute_dtype_of(const ParameterStore& store) {
  return store.dtype() == at::kHalf && store.device().is_cpu() ? at::kFloat : store.dtype();
}

}  // namespace

LlamaModel::LlamaModel(ModelConfig config, ModelOptions options)
    : ServableRuntime(std::move(config), std::move(options), &llama_weight_mapping),
      heads_(split_heads(this->config(), tp())),
      vocab_(mapping().find("model.embed_tokens.weight")->shard),
      compute_dtype_(compute_dtype_of(store())),
      attention_dtype_(store().device().is_cpu() ? at::kFloat : compute_dtype_),
      // Every table and helper lives on the model's device: one op over tensors of two devices
      // is an error.
      rope_(this->config(), store().device(), compute_dtype_),
      blocks_{store(), tp(), [this](at::Tensor& t) { queue_all_reduce(t); },
              [this] { finish_collectives(); }} {
  attention_limits_.bytes_per_call = kPagedAttentionCallBudget;
  attention_limits_.heads = heads_.heads;
  attention_limits_.kv_heads = heads_.kv_heads;
  attention_limits_.head_dim = this->config().head_dim;
  attention_limits_.element_size = static_cast<std::int64_t>(c10::elementSize(attention_dtype_));
  // The paged KV cache, in the compute dtype, this rank's KV heads; its budget in blocks is the
  // same on every rank (each holds the same number of heads), so the ranks run out together.
  KvBlockShape kv{this->config().num_hidden_layers, heads_.kv_heads, this->config().head_dim,
                  this->options().kv_block_size,
                  at::TensorOptions().dtype(compute_dtype_).device(store().device())};
  kv_pool_ = make_kv_pool(kv);

  const ModelConfig& c = this->config();
  auto index = [&](const std::string& name) { return param(name); };
  auto optional = [&](const std::string& name, bool present) {
    return present ? index(name) : kNoParam;
  };
  embed_ = index("model.embed_tokens.weight");
  final_norm_ = index("model.norm.weight");
  lm_head_ = c.tie_word_embeddings ? embed_ : index("lm_head.weight");
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    const bool moe = c.is_moe_layer(i);
    const std::string block = p + std::string(moe_names(c).block) + ".";
    layers_.push_back(LayerParams{
        .input_norm = index(p + "input_layernorm.weight"),
        .attention = {.qkv = index(p + "self_attn.qkv_proj.weight"),
                      .qkv_bias = optional(p + "self_attn.qkv_proj.bias", c.qkv_bias),
                      .o = index(p + "self_attn.o_proj.weight"),
                      .o_bias = optional(p + "self_attn.o_proj.bias", c.o_proj_bias),
                      .q_norm = optional(p + "self_attn.q_norm.weight", c.qk_norm),
                      .k_norm = optional(p + "self_attn.k_norm.weight", c.qk_norm)},
        .post_norm = index(p + "post_attention_layernorm.weight"),
        .gate_up = optional(p + "mlp.gate_up_proj.weight", !moe),
        .down = optional(p + "mlp.down_proj.weight", !moe),
        .experts = {.router = optional(block + "gate.weight", moe),
                    .w13 = optional(block + "experts.w13_weight", moe),
                    .w2 = optional(block + "experts.w2_weight", moe)},
    });
  }
}

// ---- forward -------------------------------------------------------------------------------

at::Tensor LlamaModel::forward(const at::Tensor& tokens, std::vector<ForwardSlice>& slices,
                               bool all_positions) const {
  const auto& c = config();
  const StepInputs step(tokens, slices, all_positions, c, *kv_pool_, store().device(),
                        attention_limits_, &rope_);
  const SelfAttentionShape attention{heads_.heads, heads_.kv_heads, c.head_dim, attention_dtype_};
  const std::int64_t intermediate = c.intermediate_size / tp().size;  // this rank's width
  const double eps = c.rms_norm_eps;

  // One step reads one consistent set of weights: a staged commit waits for it to end.
  std::shared_lock weights_lock(store().mutex());
  at::Tensor h = embed_tokens(blocks_, step.ids, embed_, vocab_, compute_dtype_);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerParams& p = layers_[l];
    at::Tensor x = rms_norm(blocks_, h, p.input_norm, eps);
    h = h + self_attention(blocks_, x, p.attention, attention, c, *kv_pool_, l, step);
    x = rms_norm(blocks_, h, p.post_norm, eps);
    h = h + (p.experts.w13 != kNoParam
                 ? sparse_moe(blocks_, x, p.experts, c)
                 : gated_mlp(blocks_, x, p.gate_up, p.down, intermediate, step.lora));
  }
  StepInputs::advance(slices);

  h = rms_norm(blocks_, step.returned_rows(h), final_norm_, eps);
  at::Tensor out = vocab_logits(blocks_, h, lm_head_, vocab_, c.vocab_size);
  // The step's collectives ran on the device without a host wait each: one wait here, against
  // the collective timeout, before anyone reads the logits.
  finish_collectives();
  return out;
}

}  // namespace hotswap::model_loader
