#include "model_loader/architectures/llama_model.hpp"

#include <ATen/TensorOperators.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "model_loader/blocks/gated_mlp.hpp"
#include "model_loader/blocks/linear_layers.hpp"
#include "model_loader/blocks/rms_norm.hpp"
#include "model_loader/blocks/step_inputs.hpp"
#include "model_loader/blocks/vocab_parallel.hpp"
#include "model_loader/kernels/cuda_graph_recorder.hpp"
#include "protocol/errors.hpp"

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
              [this] { finish_collectives(); }},
      no_lora_(std::vector<ForwardSlice>{}, store().device()) {
  attention_limits_.bytes_per_call = kPagedAttentionCallBudget;
  attention_limits_.heads = heads_.heads;
  attention_limits_.kv_heads = heads_.kv_heads;
  attention_limits_.head_dim = this->config().head_dim;
  attention_limits_.element_size = static_cast<std::int64_t>(c10::elementSize(attention_dtype_));
  // The paged KV cache, in the compute dtype, this rank's KV heads; its budget in blocks is the
  // same on every rank (each holds the same number of heads), so the ranks run out together. On
  // a GPU it gets what the step path leaves.
  KvBlockShape kv{this->config().num_hidden_layers, heads_.kv_heads, this->config().head_dim,
                  this->options().kv_block_size,
                  at::TensorOptions().dtype(compute_dtype_).device(store().device())};
  const bool kernel_path = choose_step_path();
  kv_pool_ = make_kv_pool(kv, kernel_path
                                  ? KernelStepRunner::device_bytes(
                                        this->config(), graph_sizes(),
                                        static_cast<std::int64_t>(c10::elementSize(compute_dtype_)))
                                  : 0);

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
  if (kernel_path) start_kernel_path();
}

kernels::StepKernelShape LlamaModel::kernel_shape() const {
  const ModelConfig& c = config();
  return {.q_heads = heads_.heads,
          .kv_heads = heads_.kv_heads,
          .head_dim = c.head_dim,
          .block_size = options().kv_block_size,
          .sliding_window = c.sliding_window,
          .eps = c.rms_norm_eps,
          .cos_sin = {}};
}

kernels::CudaGraphSizes LlamaModel::graph_sizes() const {
  const auto& o = options().step_kernels;
  return kernels::CudaGraphSizes(o.cuda_graph_sizes, o.max_num_seqs, o.enforce_eager);
}

bool LlamaModel::choose_step_path() {
  const auto& o = options().step_kernels;
  const c10::Device device = store().device();
  if (o.backend == AttentionBackend::kTorch) {
    step_path_ = "libtorch (--attention-backend TORCH)";
    return false;
  }
  // Why the kernels cannot take this model's steps; nullopt: they can.
  std::optional<std::string> why;
  if (tp().size > 1) {
    why = "tensor-parallel steps run libtorch's ops";
  } else if (config().num_experts > 0) {
    why = "mixture-of-experts layers run libtorch's ops";
  } else if (store().quantize_int8()) {
    why = "int8 weights run libtorch's ops";
  } else if (o.backend != AttentionBackend::kReference) {
    why = kernels::flashinfer_refusal(kernel_shape(), store().dtype(), device);
  }
  if (!why) return true;
  if (o.backend == AttentionBackend::kFlashInfer) {
    throw protocol::ValueError("--attention-backend FLASHINFER cannot run this model: " + *why);
  }
  // On a CPU that is the only path; on a GPU, say why it is not the kernels'.
  step_path_ = device.is_cuda() ? "libtorch (" + *why + ")" : "libtorch";
  return false;
}

void LlamaModel::start_kernel_path() {
  const auto& o = options().step_kernels;
  const ModelConfig& c = config();
  const c10::Device device = store().device();
  kernels::StepKernelShape shape = kernel_shape();
  shape.cos_sin = rope_.cos_sin_table(c.max_position_embeddings);
  const bool reference = o.backend == AttentionBackend::kReference;
  kernels::CudaGraphSizes sizes = graph_sizes();
  std::shared_ptr<kernels::GraphRecorder> recorder;
  if (!sizes.empty()) {
    recorder = reference ? std::shared_ptr<kernels::GraphRecorder>(
                               std::make_shared<kernels::EagerGraphRecorder>())
                         : std::make_shared<kernels::CudaGraphRecorder>(device);
  }
  std::ostringstream path;
  path << (reference ? "reference kernels" : "FlashInfer kernels");
  if (sizes.empty()) {
    path << ", eager (--enforce-eager)";
  } else {
    path << ", decode graphs of " << sizes.sizes().front() << " to " << sizes.sizes().back()
         << " sequences (" << sizes.sizes().size() << " sizes)";
  }
  step_path_ = path.str();
  kernel_runner_ = std::make_unique<KernelStepRunner>(
      reference ? kernels::make_reference_step_kernels(shape)
                : kernels::make_flashinfer_step_kernels(shape, store().dtype(), device),
      std::move(recorder), std::move(sizes), kv_pool_, c.max_position_embeddings, c.vocab_size,
      device);
}

// ---- forward -------------------------------------------------------------------------------

at::Tensor LlamaModel::forward(const at::Tensor& tokens, std::vector<ForwardSlice>& slices,
                               bool all_positions) const {
  const auto& c = config();
  // The kernel path takes every step without an adapter.
  if (kernel_runner_ != nullptr &&
      std::none_of(slices.begin(), slices.end(), [](const auto& s) { return s.lora != nullptr; })) {
    std::shared_lock weights_lock(store().mutex());
    std::vector<const void*> weights;
    const std::size_t params = mapping().runtime_params().size();
    weights.reserve(params);
    for (std::size_t i = 0; i < params; ++i)
      weights.push_back(store()[i].value.data_ptr());
    return kernel_runner_->forward(
        tokens, slices, all_positions, weights,
        [this](const at::Tensor& ids, const kernels::KernelStepInputs& step,
               const at::Tensor& returned) { return kernel_forward(ids, step, returned); });
  }
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

at::Tensor LlamaModel::kernel_forward(const at::Tensor& ids, const kernels::KernelStepInputs& step,
                                      const at::Tensor& returned) const {
  const auto& c = config();
  kernels::StepKernels& k = kernel_runner_->kernels();
  const std::int64_t n = step.rows, heads = heads_.heads, kv_heads = heads_.kv_heads;
  const std::int64_t hd = c.head_dim;
  auto weight = [&](std::size_t param) -> const at::Tensor& { return store()[param].value; };
  // The residual stream, and the input of the next norm: each sublayer's output is added to the
  // residual and normalized in one kernel.
  at::Tensor residual = embed_tokens(blocks_, ids, embed_, vocab_, compute_dtype_);
  at::Tensor x = k.rms_norm(residual, weight(layers_[0].input_norm));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerParams& p = layers_[static_cast<std::size_t>(l)];
    if (l > 0) k.add_rms_norm(x, residual, weight(p.input_norm));
    const SelfAttentionParams& a = p.attention;
    at::Tensor qkv = linear_with_bias(blocks_, x, a.qkv, a.qkv_bias, no_lora_);
    at::Tensor q = qkv.narrow(1, 0, heads * hd).reshape({n, heads, hd}).contiguous();
    at::Tensor key =
        qkv.narrow(1, heads * hd, kv_heads * hd).reshape({n, kv_heads, hd}).contiguous();
    at::Tensor value = qkv.narrow(1, (heads + kv_heads) * hd, kv_heads * hd)
                           .reshape({n, kv_heads, hd})
                           .contiguous();
    if (a.q_norm != kNoParam) {
      q = k.rms_norm(q, weight(a.q_norm));
      key = k.rms_norm(key, weight(a.k_norm));
    }
    k.rotate(q, key, step);
    const at::Tensor& key_pages = kv_pool_->keys(l);
    const at::Tensor& value_pages = kv_pool_->values(l);
    k.append_kv(key, value, key_pages, value_pages, step);
    at::Tensor attn = k.attention(q, key_pages, value_pages, step).reshape({n, heads * hd});
    x = row_parallel(blocks_, attn, a.o, a.o_bias, no_lora_);
    k.add_rms_norm(x, residual, weight(p.post_norm));
    at::Tensor gate_up = linear_with_bias(blocks_, x, p.gate_up, kNoParam, no_lora_);
    x = row_parallel(blocks_, k.silu_and_mul(gate_up), p.down, kNoParam, no_lora_);
  }
  k.add_rms_norm(x, residual, weight(final_norm_));
  if (returned.defined()) x = x.index_select(0, returned);
  return vocab_logits(blocks_, x, lm_head_, vocab_, c.vocab_size);
}

}  // namespace hotswap::model_loader
