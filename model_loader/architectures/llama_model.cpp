#include "model_loader/architectures/llama_model.hpp"

#include <ATen/Parallel.h>
#include <ATen/TensorIndexing.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/floor_divide.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <vector>

#include "model_loader/int8_quantization.hpp"
#include "model_loader/linear.hpp"
#include "model_loader/paged_attention.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader {
namespace {

// HF's inverse frequencies, with Llama 3.1's frequency-dependent scaling when configured.
at::Tensor rope_inverse_frequencies(const ModelConfig& c) {
  at::Tensor exponents =
      at::arange(0, c.head_dim, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) /
      static_cast<double>(c.head_dim);
  at::Tensor inv_freq = 1.0 / at::pow(c.rope_theta, exponents);
  if (!c.rope_scaling) return inv_freq;
  const auto& s = *c.rope_scaling;
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  at::Tensor wavelen = 2.0 * std::numbers::pi / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  at::Tensor smooth =
      (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  at::Tensor medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return at::where(medium, smoothed, scaled);
}

// HF's rotate_half: (x1, x2) → (-x2, x1) over the two halves of the last dimension.
at::Tensor rotate_half(const at::Tensor& x) {
  auto half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

std::shared_ptr<ServableModel> create_llama_model(const ModelConfig& config,
                                                  const ModelOptions& options) {
  return std::make_shared<LlamaModel>(config, options);
}

LlamaModel::LlamaModel(ModelConfig config, ModelOptions options)
    : ServableRuntime(std::move(config), std::move(options), &llama_weight_mapping),
      heads_(split_heads(this->config(), tp())),
      vocab_(mapping().find("model.embed_tokens.weight")->shard) {
  // float16 computes in float32 on the CPU (keeping float16 storage), where half-precision
  // matmuls are slow or missing.
  compute_dtype_ = store().dtype();
  if (compute_dtype_ == at::kHalf && store().device().is_cpu()) compute_dtype_ = at::kFloat;
  attention_dtype_ = store().device().is_cpu() ? at::kFloat : compute_dtype_;
  attention_limits_.bytes_per_call = kPagedAttentionCallBudget;
  attention_limits_.heads = heads_.heads;
  attention_limits_.kv_heads = heads_.kv_heads;
  attention_limits_.head_dim = this->config().head_dim;
  attention_limits_.element_size = static_cast<std::int64_t>(c10::elementSize(attention_dtype_));
  // Every table and helper lives on the model's device: one op over tensors of two devices is
  // an error, and a table on the CPU would be copied over at every step if it were not.
  inv_freq_ = rope_inverse_frequencies(this->config()).to(store().device());
  // The paged KV cache, in the compute dtype, this rank's KV heads; its budget in blocks is the
  // same on every rank (each holds the same number of heads), so the ranks run out together.
  KvBlockShape kv{this->config().num_hidden_layers, heads_.kv_heads, this->config().head_dim,
                  this->options().kv_block_size,
                  at::TensorOptions().dtype(compute_dtype_).device(store().device())};
  const auto budget = static_cast<std::int64_t>(this->options().kv_cache_memory_bytes /
                                                std::max<std::uint64_t>(1, kv.block_bytes()));
  kv_pool_ = std::make_shared<KvBlockPool>(kv, budget);

  const ModelConfig& c = this->config();
  auto index = [&](const std::string& name) { return param(name); };
  auto optional = [&](const std::string& name, bool present) {
    return present ? index(name) : kNone;
  };
  embed_ = index("model.embed_tokens.weight");
  final_norm_ = index("model.norm.weight");
  lm_head_ = c.tie_word_embeddings ? embed_ : index("lm_head.weight");
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    const bool moe = c.is_moe_layer(i);
    const std::string block = p + std::string(moe_names(c).block) + ".";
    layers_.push_back(LayerParams{
        index(p + "input_layernorm.weight"),
        index(p + "self_attn.qkv_proj.weight"),
        optional(p + "self_attn.qkv_proj.bias", c.qkv_bias),
        index(p + "self_attn.o_proj.weight"),
        optional(p + "self_attn.o_proj.bias", c.o_proj_bias),
        optional(p + "self_attn.q_norm.weight", c.qk_norm),
        optional(p + "self_attn.k_norm.weight", c.qk_norm),
        index(p + "post_attention_layernorm.weight"),
        optional(p + "mlp.gate_up_proj.weight", !moe),
        optional(p + "mlp.down_proj.weight", !moe),
        optional(block + "gate.weight", moe),
        optional(block + "experts.w13_weight", moe),
        optional(block + "experts.w2_weight", moe),
    });
  }
}

// ---- forward -------------------------------------------------------------------------------

at::Tensor LlamaModel::linear(const at::Tensor& x, std::size_t param,
                              std::optional<c10::ScalarType> out) const {
  const auto& t = store()[param];
  if (t.scale.defined()) {
    at::Tensor y = int8_linear(x, t.value, t.scale);
    return out ? y.to(*out) : y;
  }
  return apply_linear(x, t.value, out);
}

// The bias joins the float32 product before the one rounding to x's dtype, as one fused
// addmm (transformers' F.linear) computes it, rather than after it.
// The base layer's output rounded as without an adapter, then the LoRA update added in float32
// and rounded again: PEFT's order (its base layer's result plus lora_B(lora_A(x)) · scaling), and
// the base layer keeps its fastest kernel (a float32 product of a bfloat16 model takes another).
at::Tensor LlamaModel::linear_with_bias(const at::Tensor& x, std::size_t param, std::size_t bias,
                                        const LoraBatch& lora) const {
  at::Tensor y;
  if (bias == kNone) {
    y = linear(x, param);
  } else {
    y = (linear(x, param, at::kFloat) + store()[bias].value.to(at::kFloat)).to(x.scalar_type());
  }
  lora.add_updates(y, x, param);
  return y;
}

at::Tensor LlamaModel::row_parallel(const at::Tensor& x, std::size_t param, std::size_t bias,
                                    const LoraBatch& lora) const {
  if (tp().size == 1) return linear_with_bias(x, param, bias, lora);
  at::Tensor y = linear(x, param, at::kFloat);
  // (x_r A_rᵀ) Bᵀ summed over the ranks is (x Aᵀ) Bᵀ: each rank adds its part before the sum.
  lora.add_updates(y, x, param);
  queue_all_reduce(y);
  if (bias != kNone) y = y + store()[bias].value.to(at::kFloat);
  return y.to(x.scalar_type());
}

at::Tensor LlamaModel::embed(const at::Tensor& ids) const {
  const at::Tensor& table = store()[embed_].value;
  if (vocab_.whole()) return table.index({ids}).to(compute_dtype_);
  // Rows this rank holds are looked up; the rest are zeros, which the sum fills in exactly.
  at::Tensor local = ids - vocab_.start;
  at::Tensor held = (local >= 0).logical_and(local < vocab_.size);
  at::Tensor rows = table.index({local.masked_fill(held.logical_not(), 0)}).to(compute_dtype_);
  rows = rows.masked_fill(held.logical_not().unsqueeze(1), 0);
  queue_all_reduce(rows);
  return rows;
}

at::Tensor LlamaModel::logits(const at::Tensor& h) const {
  at::Tensor local = linear(h, lm_head_, at::kFloat);
  if (vocab_.whole()) return local;
  at::Tensor full = at::zeros({h.size(0), config().vocab_size}, local.options());
  full.narrow(1, vocab_.start, vocab_.size).copy_(local);
  queue_all_reduce(full);
  return full;
}

// A sparse layer's MLP as transformers computes it: the router's softmax over the experts in
// float32, the top k per token (rescaled to sum to 1 where the config says so), then each expert
// that any token chose runs once, on exactly the tokens routed to it; its output, scaled by each
// token's weight, is added back in expert order, as transformers adds it.
at::Tensor LlamaModel::experts(const at::Tensor& x, const LayerParams& p) const {
  const ModelConfig& c = config();
  const auto mine = tp().local_experts(c.num_experts);
  const bool by_experts = mine.count != c.num_experts;
  const std::int64_t k = c.num_experts_per_tok;
  const std::int64_t inter =
      by_experts ? c.moe_intermediate_size : c.moe_intermediate_size / tp().size;
  // Router logits straight to float32 (transformers rounds them to the activations' dtype
  // first): a near-tie between two experts is then decided as float32 compute decides it.
  at::Tensor probs = at::softmax(linear(x, p.router, at::kFloat), -1);
  auto [weights, chosen] = probs.topk(k, -1);  // [tokens, k]
  if (c.norm_topk_prob) weights = weights / weights.sum(-1, /*keepdim=*/true);
  if (!c.router_weights_float32) weights = weights.to(x.scalar_type());

  // The (token, slot) pairs grouped by expert: one sort, and how many each expert got.
  at::Tensor flat = chosen.reshape({-1});
  at::Tensor order = std::get<1>(flat.sort());
  at::Tensor token_of = at::floor_divide(order, k);
  at::Tensor weight_of = weights.reshape({-1}).index({order}).unsqueeze(1);
  // The counts come to the host, which waits for the stream, and so for the all-reduces queued
  // on it: waited for here first, against the collective timeout, never without one.
  finish_collectives();
  at::Tensor counts = at::bincount(flat, {}, c.num_experts).to(at::kCPU);
  const auto* count = counts.data_ptr<std::int64_t>();

  const at::Tensor& w13 = store()[p.w13].value;
  const at::Tensor& w2 = store()[p.w2].value;
  // Experts' outputs add up in float32 and are rounded once.
  at::Tensor out = at::zeros_like(x, x.options().dtype(at::kFloat));
  std::int64_t start = 0;
  for (std::int64_t e = 0; e < c.num_experts; start += count[e], ++e) {
    if (count[e] == 0 || !mine.holds(e)) continue;  // another rank's expert runs there
    at::Tensor tokens = token_of.narrow(0, start, count[e]);
    const std::int64_t local = e - mine.first;
    at::Tensor gate_up = apply_linear(x.index({tokens}), w13[local]);
    at::Tensor m = at::silu(gate_up.narrow(1, 0, inter)) * gate_up.narrow(1, inter, inter);
    at::Tensor y = apply_linear(m, w2[local]);
    out.index_add_(0, tokens, (y * weight_of.narrow(0, start, count[e])).to(at::kFloat));
  }
  // Each rank ran its slice of every expert's width, or (expert parallelism) its own experts.
  queue_all_reduce(out);
  return out.to(x.scalar_type());
}

// HF's RMSNorm: normalize in float32, cast back, then scale by the weight.
at::Tensor LlamaModel::rms_norm(const at::Tensor& x, std::size_t param) const {
  at::Tensor h = x.to(at::kFloat);
  at::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * at::rsqrt(variance + config().rms_norm_eps);
  return store()[param].value.to(x.scalar_type()) * h.to(x.scalar_type());
}

std::pair<at::Tensor, at::Tensor> LlamaModel::rope_tables(const at::Tensor& positions) const {
  // As HF computes them: the angles of this step's positions in float32 on the model's device
  // (a few kilobytes, cheaper than a cached table's lookup), rotated in the activations' dtype.
  at::Tensor freqs = positions.to(at::kFloat).unsqueeze(1) * inv_freq_.unsqueeze(0);
  at::Tensor angles = at::cat({freqs, freqs}, -1);
  return {angles.cos().to(compute_dtype_).unsqueeze(1),
          angles.sin().to(compute_dtype_).unsqueeze(1)};
}

at::Tensor LlamaModel::forward(const at::Tensor& tokens, std::vector<ForwardSlice>& slices,
                               bool all_positions) const {
  const auto& c = config();
  const std::int64_t n = tokens.size(0);
  const std::int64_t heads = heads_.heads, kv_heads = heads_.kv_heads;  // this rank's
  const std::int64_t hd = c.head_dim;
  const double scaling = 1.0 / std::sqrt(static_cast<double>(hd));

  at::Tensor ids = checked_step_tokens(tokens, slices, c.vocab_size).to(store().device());
  std::vector<std::int64_t> position_list;
  position_list.reserve(static_cast<std::size_t>(n));
  for (auto& s : slices) {
    for (std::int64_t i = 0; i < s.num_tokens; ++i)
      position_list.push_back(s.cache->length + i);
  }
  at::Tensor positions =
      at::tensor(position_list, at::TensorOptions().dtype(at::kLong)).to(store().device());
  // Each slice's last row, for a step that returns only those. Made here, before any layer: a
  // copy from host memory waits for the stream, and later in the step the stream waits on the
  // queued all-reduces, which only finish_collectives() waits for against the timeout.
  at::Tensor last_rows;
  if (!all_positions) {
    std::vector<std::int64_t> last;
    std::int64_t end = 0;
    for (const auto& s : slices) {
      end += s.num_tokens;
      last.push_back(end - 1);
    }
    last_rows = at::tensor(last, at::TensorOptions().dtype(at::kLong)).to(store().device());
  }

  // Blocks for the step's new positions, taken before any weight is read, and the indices every
  // layer's attention reads them by.
  std::vector<PagedSlice> paged;
  paged.reserve(slices.size());
  for (auto& s : slices) {
    kv_pool_->reserve(*s.cache, s.num_tokens);
    paged.push_back({s.cache, s.cache->length, s.num_tokens});
  }
  const PagedAttentionPlan plan = PagedAttentionPlan::make(
      paged, kv_pool_->block_size(), c.sliding_window, store().device(), attention_limits_);

  // Per step, not per layer: the rotary angles.
  auto [cos, sin] = rope_tables(positions);

  // The rows each LoRA adapter of the step applies to (none when no slice has one).
  const LoraBatch lora(slices, store().device());

  // One step reads one consistent set of weights: a staged commit waits for it to end.
  std::shared_lock weights_lock(store().mutex());
  // Row lookups index (rather than index_select) so that the meta device, which tests use to
  // check that every tensor follows the model's device, can run the step too.
  at::Tensor h = embed(ids);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerParams& p = layers_[l];
    at::Tensor x = rms_norm(h, p.input_norm);
    at::Tensor qkv = linear_with_bias(x, p.qkv, p.qkv_bias, lora);
    at::Tensor q = qkv.narrow(1, 0, heads * hd).reshape({n, heads, hd});
    at::Tensor k = qkv.narrow(1, heads * hd, kv_heads * hd).reshape({n, kv_heads, hd});
    at::Tensor v = qkv.narrow(1, (heads + kv_heads) * hd, kv_heads * hd).reshape({n, kv_heads, hd});
    if (p.q_norm != kNone) {
      q = rms_norm(q, p.q_norm);
      k = rms_norm(k, p.k_norm);
    }
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;

    at::Tensor key_pool = kv_pool_->keys(l), value_pool = kv_pool_->values(l);
    write_kv(k, v, key_pool, value_pool, plan);
    at::Tensor attn = paged_attention(q, key_pool, value_pool, plan, kv_pool_->block_size(),
                                      scaling, c.sliding_window, attention_dtype_)
                          .reshape({n, heads * hd});
    at::Tensor o = row_parallel(attn, p.o, p.o_bias, lora);
    h = h + o;

    x = rms_norm(h, p.post_norm);
    if (p.w13 != kNone) {
      h = h + experts(x, p);
    } else {
      at::Tensor gate_up = linear_with_bias(x, p.gate_up, kNone, lora);
      const std::int64_t inter = c.intermediate_size / tp().size;
      at::Tensor m = at::silu(gate_up.narrow(1, 0, inter)) * gate_up.narrow(1, inter, inter);
      h = h + row_parallel(m, p.down, kNone, lora);
    }
  }
  for (auto& s : slices)
    s.cache->length += s.num_tokens;

  if (!all_positions) h = h.index({last_rows});
  h = rms_norm(h, final_norm_);
  at::Tensor out = logits(h);
  // The step's collectives ran on the device without a host wait each: one wait here, against
  // the collective timeout, before anyone reads the logits.
  finish_collectives();
  return out;
}

}  // namespace hotswap::model_loader
