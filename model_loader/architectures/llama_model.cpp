#include "model_loader/architectures/llama_model.hpp"

#include <ATen/Parallel.h>
#include <ATen/TensorIndexing.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/_unique.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
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
#include <limits>
#include <numbers>
#include <optional>
#include <thread>
#include <vector>

#include "model_loader/causal_attention.hpp"
#include "model_loader/int8_quantization.hpp"
#include "model_loader/linear.hpp"
#include "protocol/errors.hpp"
#include "protocol/param_meta.hpp"
#include "transport/communicator.hpp"
#include "transport/tensor_digest.hpp"
#include "transport/torch_dtype.hpp"

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

// ---- the model -----------------------------------------------------------------------------

namespace {
TensorParallelRank rank_in(const ModelOptions& options) {
  if (!options.tensor_parallel_group) return {};
  return {options.tensor_parallel_group->rank(), options.tensor_parallel_group->world_size(),
          options.enable_expert_parallel};
}
}  // namespace

LlamaModel::LlamaModel(ModelConfig config, ModelOptions options)
    : config_(std::move(config)),
      options_(std::move(options)),
      tp_(rank_in(options_)),
      heads_(split_heads(config_, tp_)),
      mapping_(llama_weight_mapping(config_, tp_)),
      vocab_(mapping_.find("model.embed_tokens.weight")->shard),
      store_(mapping_, transport::to_scalar_type(options_.dtype.value_or(config_.torch_dtype)),
             options_.device, options_.quantize_int8) {
  auto runtime = options_.dtype.value_or(config_.torch_dtype);
  if (!protocol::is_floating_point(runtime) || protocol::item_size(runtime) < 2) {
    throw protocol::ValueError("runtime dtype " + std::string(protocol::dtype_name(runtime)) +
                               " is not supported (float32, bfloat16 and float16 are)");
  }
  // libtorch starts with one thread on some machines; generation should use every core, shared
  // between the tensor-parallel ranks of this host.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(std::max(1, cores / tp_.size));
  // Half-precision matmuls are not implemented for the CPU in older libtorch: compute in
  // float32 there, keeping float16 storage.
  compute_dtype_ = store_.dtype();
  if (compute_dtype_ == at::kHalf && options_.device.is_cpu()) compute_dtype_ = at::kFloat;
  attention_dtype_ = options_.device.is_cpu() ? at::kFloat : compute_dtype_;
  // Every table and helper lives on the model's device: one op over tensors of two devices is
  // an error, and a table on the CPU would be copied over at every step if it were not.
  inv_freq_ = rope_inverse_frequencies(config_).to(store_.device());

  auto index = [&](const std::string& name) { return mapping_.param_index(name); };
  auto optional = [&](const std::string& name, bool present) {
    return present ? index(name) : kNone;
  };
  embed_ = index("model.embed_tokens.weight");
  final_norm_ = index("model.norm.weight");
  lm_head_ = config_.tie_word_embeddings ? embed_ : index("lm_head.weight");
  for (int i = 0; i < config_.num_hidden_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    const bool moe = config_.is_moe_layer(i);
    const std::string block = p + std::string(moe_names(config_).block) + ".";
    layers_.push_back(LayerParams{
        index(p + "input_layernorm.weight"),
        index(p + "self_attn.qkv_proj.weight"),
        optional(p + "self_attn.qkv_proj.bias", config_.qkv_bias),
        index(p + "self_attn.o_proj.weight"),
        optional(p + "self_attn.o_proj.bias", config_.o_proj_bias),
        optional(p + "self_attn.q_norm.weight", config_.qk_norm),
        optional(p + "self_attn.k_norm.weight", config_.qk_norm),
        index(p + "post_attention_layernorm.weight"),
        optional(p + "mlp.gate_up_proj.weight", !moe),
        optional(p + "mlp.down_proj.weight", !moe),
        optional(block + "gate.weight", moe),
        optional(block + "experts.w13_weight", moe),
        optional(block + "experts.w2_weight", moe),
    });
  }
}

// ---- weights -------------------------------------------------------------------------------

void LlamaModel::load_checkpoint(const Checkpoint& checkpoint) {
  std::lock_guard lock(reload_mutex_);
  if (reload_) throw protocol::RuntimeError("cannot load a checkpoint during a weight update");
  LayerwiseReload session(store_, UpdateMode::kInplace);
  session.load(checkpoint, at::get_num_threads());
  note_checkpoint_dtypes(checkpoint);
  session.finish(/*require_complete=*/true);
  dirty_ = false;
}

void LlamaModel::start_reload() {
  std::lock_guard lock(reload_mutex_);
  if (reload_) throw protocol::RuntimeError("a weight reload is already active");
  reload_ = std::make_unique<LayerwiseReload>(store_, options_.update_mode);
  dirty_before_session_ = dirty_;
}

void LlamaModel::load_weights(const std::vector<NamedTensor>& weights) {
  std::lock_guard lock(reload_mutex_);
  if (!reload_) {
    throw protocol::RuntimeError("load_weights called outside a weight reload; start one first");
  }
  try {
    reload_->load(weights);
  } catch (...) {
    if (reload_->wrote_live()) dirty_ = true;
    throw;
  }
  if (reload_->wrote_live()) dirty_ = true;
  for (const auto& [name, tensor] : weights) {
    if (mapping_.find(name) != nullptr) checkpoint_dtypes_[name] = tensor.scalar_type();
  }
}

void LlamaModel::load_weights_from(const Checkpoint& checkpoint) {
  std::lock_guard lock(reload_mutex_);
  if (!reload_) {
    throw protocol::RuntimeError("load_weights called outside a weight reload; start one first");
  }
  try {
    reload_->load(checkpoint, at::get_num_threads());
  } catch (...) {
    if (reload_->wrote_live()) dirty_ = true;
    throw;
  }
  if (reload_->wrote_live()) dirty_ = true;
  note_checkpoint_dtypes(checkpoint);
}

void LlamaModel::note_checkpoint_dtypes(const Checkpoint& checkpoint) {
  for (const auto& name : checkpoint.names()) {
    if (mapping_.find(name) != nullptr) {
      checkpoint_dtypes_[name] = transport::to_scalar_type(checkpoint.info(name).dtype);
    }
  }
}

std::optional<at::Tensor> LlamaModel::destination_for(const std::string& name,
                                                      c10::ScalarType dtype,
                                                      c10::IntArrayRef shape) {
  std::lock_guard lock(reload_mutex_);
  if (!reload_) return std::nullopt;  // load_weights will say why
  return reload_->destination(name, dtype, shape);
}

void LlamaModel::mark_received(const std::string& name) {
  std::lock_guard lock(reload_mutex_);
  if (!reload_) throw protocol::RuntimeError("mark_received called outside a weight reload");
  reload_->mark_received(name);
  checkpoint_dtypes_[name] = store_.dtype();
}

void LlamaModel::finish_reload() {
  std::lock_guard lock(reload_mutex_);
  if (!reload_) throw protocol::RuntimeError("finish_reload called without an active reload");
  auto session = std::move(reload_);
  // A dirty model comes clean only from a session that delivered every tensor.
  bool cleans = !dirty_before_session_ || session->received_everything();
  try {
    session->finish(/*require_complete=*/false);
  } catch (...) {
    if (session->wrote_live()) dirty_ = true;
    throw;
  }
  if (session->mode() == UpdateMode::kInplace) dirty_ = !cleans;
}

void LlamaModel::abort_reload() {
  std::lock_guard lock(reload_mutex_);
  if (!reload_) return;
  if (reload_->wrote_live()) dirty_ = true;
  reload_->abort();
  reload_.reset();
}

std::vector<LlamaModel::ResolvedPatch> LlamaModel::resolve_patches(
    const std::vector<WeightPatch>& patches) const {
  std::vector<ResolvedPatch> resolved;
  for (const auto& p : patches) {
    const CheckpointSlot* slot = mapping_.find(p.name);
    if (slot == nullptr) {
      throw protocol::ValueError("unknown checkpoint tensor '" + p.name + "' in a sparse patch");
    }
    if (!p.shape.empty() && p.shape != slot->shape) {
      throw protocol::ValueError(
          "sparse patch '" + p.name + "' declares shape " + protocol::shape_to_string(p.shape) +
          " but the checkpoint tensor's shape is " + protocol::shape_to_string(slot->shape));
    }
    if (store_.quantized(slot->param)) {
      throw protocol::ValueError("'" + p.name +
                                 "' is held int8-quantized; sparse patches need "
                                 "exact runtime storage");
    }
    if (p.indices.scalar_type() != at::kInt || p.indices.dim() != 1 || p.values.dim() != 1 ||
        p.indices.numel() != p.values.numel()) {
      throw protocol::ValueError("sparse patch '" + p.name +
                                 "' needs 1-D int32 indices and 1-D values of the same length");
    }
    if (!at::isFloatingType(p.values.scalar_type())) {
      throw protocol::ValueError("sparse patch '" + p.name + "' has non-floating values");
    }
    std::int64_t numel = 1;
    for (auto d : slot->shape)
      numel *= d;
    at::Tensor idx = p.indices.to(at::kLong);
    if (idx.numel() > 0) {
      bool in_range = idx.min().item<std::int64_t>() >= 0 && idx.max().item<std::int64_t>() < numel;
      bool unique = std::get<0>(at::_unique(idx)).numel() == idx.numel();
      bool finite = !p.values.isnan().any().item<bool>();
      if (!in_range || !unique || !finite) {
        throw protocol::ValueError(
            "sparse checkpoint patches contain NaN values, out-of-range "
            "indices, or duplicate indices ('" +
            p.name + "')");
      }
    }
    // Indices address the whole checkpoint tensor. A tensor-parallel rank applies those that
    // fall in its slice and ignores the rest, as vLLM's sharded loaders do; the slice is rows
    // [row_offset, row_offset + rows) of the runtime parameter, so its flat positions shift by
    // row_offset × the slice's row length.
    at::Tensor values = p.values;
    std::int64_t row_length = numel / slot->shape[0];
    if (!slot->shard.whole()) {
      const std::int64_t columns = row_length;
      at::Tensor row = at::floor_divide(idx, columns), column = idx - row * columns;
      const ShardRange& r = slot->shard;
      at::Tensor along = r.dim == 0 ? row : column;
      at::Tensor kept = (along >= r.start).logical_and(along < r.start + r.size);
      row = row.index({kept});
      column = column.index({kept});
      values = values.index({kept.to(values.device())});
      if (r.dim == 0) {
        idx = (row - r.start) * columns + column;
      } else {
        row_length = r.size;
        idx = row * r.size + (column - r.start);
      }
    }
    resolved.push_back({slot, idx + slot->row_offset * row_length, values});
  }
  return resolved;
}

void LlamaModel::check_patches(const std::vector<WeightPatch>& patches) const {
  resolve_patches(patches);
}

void LlamaModel::apply_patches(const std::vector<WeightPatch>& patches) {
  // Everything is checked before anything is written: a bad patch loses nothing.
  const auto resolved = resolve_patches(patches);
  std::lock_guard reload(reload_mutex_);
  if (reload_) throw protocol::RuntimeError("cannot apply sparse patches during a weight reload");
  std::unique_lock lock(store_.mutex());  // between two generation steps
  for (auto& r : resolved) {
    at::Tensor flat = store_[r.slot->param].value.view({-1});
    flat.index_put_({r.runtime_indices.to(flat.device())},
                    r.values.to(flat.scalar_type()).to(flat.device()));
    checkpoint_dtypes_[r.slot->name] = checkpoint_dtypes_.count(r.slot->name)
                                           ? checkpoint_dtypes_[r.slot->name]
                                           : r.values.scalar_type();
  }
}

bool LlamaModel::reload_active() const {
  std::lock_guard lock(reload_mutex_);
  return reload_ != nullptr;
}

bool LlamaModel::is_dirty() const {
  std::lock_guard lock(reload_mutex_);
  return dirty_;
}

// ---- forward -------------------------------------------------------------------------------

at::Tensor LlamaModel::linear(const at::Tensor& x, std::size_t param,
                              std::optional<c10::ScalarType> out) const {
  const auto& t = store_[param];
  if (t.scale.defined()) {
    at::Tensor y = int8_linear(x, t.value, t.scale);
    return out ? y.to(*out) : y;
  }
  return apply_linear(x, t.value, out);
}

// The bias joins the float32 product before the one rounding to x's dtype, as one fused
// addmm (transformers' F.linear) computes it, rather than after it.
at::Tensor LlamaModel::linear_with_bias(const at::Tensor& x, std::size_t param,
                                        std::size_t bias) const {
  if (bias == kNone) return linear(x, param);
  return (linear(x, param, at::kFloat) + store_[bias].value.to(at::kFloat)).to(x.scalar_type());
}

at::Tensor LlamaModel::row_parallel(const at::Tensor& x, std::size_t param,
                                    std::size_t bias) const {
  if (tp_.size == 1) return linear_with_bias(x, param, bias);
  at::Tensor y = linear(x, param, at::kFloat);
  all_reduce(y);
  if (bias != kNone) y = y + store_[bias].value.to(at::kFloat);
  return y.to(x.scalar_type());
}

void LlamaModel::all_reduce(at::Tensor& t) const {
  if (tp_.size == 1) return;
  auto& group = *options_.tensor_parallel_group;
  // Partial sums travel as float32 (half types widen exactly) and are rounded once, after the
  // sum. Over NCCL they stay on the device; over gloo, which Debian's libtorch builds for the
  // CPU only, a GPU shard's go through host memory.
  const bool widen = t.scalar_type() != at::kFloat && t.scalar_type() != at::kDouble;
  at::Tensor wire = t;
  if (group.device_type() == c10::DeviceType::CPU && !t.device().is_cpu()) wire = wire.to(at::kCPU);
  if (widen) wire = wire.to(at::kFloat);
  wire = wire.contiguous();
  group.all_reduce_sum(wire, options_.collective_timeout);
  if (!wire.is_same(t)) t.copy_(wire);
}

at::Tensor LlamaModel::embed(const at::Tensor& ids) const {
  const at::Tensor& table = store_[embed_].value;
  if (vocab_.whole()) return table.index({ids}).to(compute_dtype_);
  // Rows this rank holds are looked up; the rest are zeros, which the sum fills in exactly.
  at::Tensor local = ids - vocab_.start;
  at::Tensor held = (local >= 0).logical_and(local < vocab_.size);
  at::Tensor rows = table.index({local.masked_fill(held.logical_not(), 0)}).to(compute_dtype_);
  rows = rows.masked_fill(held.logical_not().unsqueeze(1), 0);
  all_reduce(rows);
  return rows;
}

at::Tensor LlamaModel::logits(const at::Tensor& h) const {
  at::Tensor local = linear(h, lm_head_, at::kFloat);
  if (vocab_.whole()) return local;
  at::Tensor full = at::zeros({h.size(0), config_.vocab_size}, local.options());
  full.narrow(1, vocab_.start, vocab_.size).copy_(local);
  all_reduce(full);
  return full;
}

// A sparse layer's MLP as transformers computes it: the router's softmax over the experts in
// float32, the top k per token (rescaled to sum to 1 where the config says so), then each expert
// that any token chose runs once, on exactly the tokens routed to it; its output, scaled by each
// token's weight, is added back in expert order, as transformers adds it.
at::Tensor LlamaModel::experts(const at::Tensor& x, const LayerParams& p) const {
  const ModelConfig& c = config_;
  const auto mine = tp_.local_experts(c.num_experts);
  const bool by_experts = mine.count != c.num_experts;
  const std::int64_t k = c.num_experts_per_tok;
  const std::int64_t inter =
      by_experts ? c.moe_intermediate_size : c.moe_intermediate_size / tp_.size;
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
  at::Tensor counts = at::bincount(flat, {}, c.num_experts).to(at::kCPU);
  const auto* count = counts.data_ptr<std::int64_t>();

  const at::Tensor& w13 = store_[p.w13].value;
  const at::Tensor& w2 = store_[p.w2].value;
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
  all_reduce(out);
  return out.to(x.scalar_type());
}

// HF's RMSNorm: normalize in float32, cast back, then scale by the weight.
at::Tensor LlamaModel::rms_norm(const at::Tensor& x, std::size_t param) const {
  at::Tensor h = x.to(at::kFloat);
  at::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * at::rsqrt(variance + config_.rms_norm_eps);
  return store_[param].value.to(x.scalar_type()) * h.to(x.scalar_type());
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
  const auto& c = config_;
  const std::int64_t n = tokens.size(0);
  const std::int64_t heads = heads_.heads, kv_heads = heads_.kv_heads;  // this rank's
  const std::int64_t hd = c.head_dim, group = heads / kv_heads;
  const double scaling = 1.0 / std::sqrt(static_cast<double>(hd));
  auto options = at::TensorOptions().dtype(compute_dtype_).device(store_.device());

  at::Tensor ids = checked_step_tokens(tokens, slices, c.vocab_size).to(store_.device());
  std::vector<std::int64_t> position_list;
  position_list.reserve(static_cast<std::size_t>(n));
  for (auto& s : slices) {
    for (std::int64_t i = 0; i < s.num_tokens; ++i)
      position_list.push_back(s.cache->length + i);
  }
  at::Tensor positions =
      at::tensor(position_list, at::TensorOptions().dtype(at::kLong)).to(store_.device());

  // Caches grow before the weights are read, so a step never reallocates mid-layer.
  for (auto& s : slices) {
    KvCache& cache = *s.cache;
    std::int64_t needed = cache.length + s.num_tokens;
    if (needed > cache.capacity()) {
      std::int64_t capacity = std::max<std::int64_t>(needed, 2 * cache.capacity());
      capacity = std::max<std::int64_t>(capacity, 16);
      for (int l = 0; l < c.num_hidden_layers; ++l) {
        at::Tensor k = at::zeros({kv_heads, capacity, hd}, options);
        at::Tensor v = at::zeros({kv_heads, capacity, hd}, options);
        if (cache.length > 0) {
          k.narrow(1, 0, cache.length).copy_(cache.keys[l].narrow(1, 0, cache.length));
          v.narrow(1, 0, cache.length).copy_(cache.values[l].narrow(1, 0, cache.length));
        }
        if (cache.keys.size() <= static_cast<std::size_t>(l)) {
          cache.keys.push_back(k);
          cache.values.push_back(v);
        } else {
          cache.keys[l] = k;
          cache.values[l] = v;
        }
      }
    }
  }

  // Per step, not per layer: the rotary angles.
  auto [cos, sin] = rope_tables(positions);

  // One step reads one consistent set of weights: a staged commit waits for it to end.
  std::shared_lock weights_lock(store_.mutex());
  // Row lookups index (rather than index_select) so that the meta device, which tests use to
  // check that every tensor follows the model's device, can run the step too.
  at::Tensor h = embed(ids);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerParams& p = layers_[l];
    at::Tensor x = rms_norm(h, p.input_norm);
    at::Tensor qkv = linear_with_bias(x, p.qkv, p.qkv_bias);
    at::Tensor q = qkv.narrow(1, 0, heads * hd).reshape({n, heads, hd});
    at::Tensor k = qkv.narrow(1, heads * hd, kv_heads * hd).reshape({n, kv_heads, hd});
    at::Tensor v = qkv.narrow(1, (heads + kv_heads) * hd, kv_heads * hd).reshape({n, kv_heads, hd});
    if (p.q_norm != kNone) {
      q = rms_norm(q, p.q_norm);
      k = rms_norm(k, p.k_norm);
    }
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;

    std::vector<at::Tensor> outputs;
    outputs.reserve(slices.size());
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < slices.size(); ++i) {
      const ForwardSlice& s = slices[i];
      KvCache& cache = *s.cache;
      const std::int64_t len = s.num_tokens, start = cache.length, keys = start + len;
      cache.keys[l].narrow(1, start, len).copy_(k.narrow(0, offset, len).transpose(0, 1));
      cache.values[l].narrow(1, start, len).copy_(v.narrow(0, offset, len).transpose(0, 1));
      at::Tensor kk = cache.keys[l].narrow(1, 0, keys);
      at::Tensor vv = cache.values[l].narrow(1, 0, keys);
      if (group > 1) {  // GQA: query head i reads kv head i / group
        kk = kk.unsqueeze(1).expand({kv_heads, group, keys, hd}).reshape({heads, keys, hd});
        vv = vv.unsqueeze(1).expand({kv_heads, group, keys, hd}).reshape({heads, keys, hd});
      }
      // [heads, len, hd]
      at::Tensor qq = q.narrow(0, offset, len).transpose(0, 1).to(attention_dtype_);
      outputs.push_back(causal_attention(qq, kk.to(attention_dtype_), vv.to(attention_dtype_),
                                         start, scaling, c.sliding_window)
                            .to(compute_dtype_)
                            .transpose(0, 1)
                            .reshape({len, heads * hd}));
      offset += len;
    }
    at::Tensor attn = outputs.size() == 1 ? outputs[0] : at::cat(outputs, 0);
    at::Tensor o = row_parallel(attn, p.o, p.o_bias);
    h = h + o;

    x = rms_norm(h, p.post_norm);
    if (p.w13 != kNone) {
      h = h + experts(x, p);
    } else {
      at::Tensor gate_up = linear(x, p.gate_up);
      const std::int64_t inter = c.intermediate_size / tp_.size;
      at::Tensor m = at::silu(gate_up.narrow(1, 0, inter)) * gate_up.narrow(1, inter, inter);
      h = h + row_parallel(m, p.down, kNone);
    }
  }
  for (auto& s : slices)
    s.cache->length += s.num_tokens;

  if (!all_positions) {
    std::vector<std::int64_t> last;
    std::int64_t offset = 0;
    for (const auto& s : slices) {
      offset += s.num_tokens;
      last.push_back(offset - 1);
    }
    h = h.index({at::tensor(last, at::TensorOptions().dtype(at::kLong)).to(store_.device())});
  }
  h = rms_norm(h, final_norm_);
  return logits(h);
}

// ---- checksums -----------------------------------------------------------------------------

void LlamaModel::zero_weights() {
  std::lock_guard reload(reload_mutex_);
  if (reload_) throw protocol::RuntimeError("cannot reset weights during a weight update");
  std::unique_lock lock(store_.mutex());
  for (std::size_t i = 0; i < mapping_.runtime_params().size(); ++i) {
    store_[i].value.zero_();
    if (store_[i].scale.defined()) store_[i].scale.zero_();
  }
}

std::map<std::string, std::string> LlamaModel::runtime_checksums(
    const std::string& key_prefix_template) const {
  std::string key_prefix = key_prefix_template;
  if (auto at = key_prefix.find("{tp}"); at != std::string::npos) {
    key_prefix.replace(at, 4, std::to_string(tp_.rank));
  }
  std::shared_lock lock(store_.mutex());
  std::map<std::string, std::string> out;
  const auto& params = mapping_.runtime_params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    out[key_prefix + params[i].name] = transport::sha256_hex(store_[i].value);
    if (store_[i].scale.defined()) {
      out[key_prefix + params[i].name + "_scale"] = transport::sha256_hex(store_[i].scale);
    }
  }
  return out;
}

std::map<std::string, std::string> LlamaModel::checkpoint_checksums() const {
  if (store_.quantize_int8()) {
    throw protocol::ValueError(
        "checkpoint-format checksums need exact runtime storage, but this model's linear "
        "weights are int8-quantized (lossy); compare runtime checksums instead");
  }
  std::map<std::string, c10::ScalarType> dtypes;
  {
    std::lock_guard lock(reload_mutex_);
    dtypes = checkpoint_dtypes_;
  }
  std::shared_lock lock(store_.mutex());
  std::map<std::string, std::string> out;
  for (const auto& slot : mapping_.slots()) {
    at::Tensor rows = slot_rows(store_[slot.param].value, slot);
    if (!slot.shard.whole()) {
      // The ranks put the tensor back together: each places its slice (the first of the
      // ranks holding a replicated one), zeros elsewhere, and the sum is exact.
      at::Tensor whole = at::zeros(slot.shape, rows.options());
      if (slot.shard.primary) {
        whole.narrow(slot.shard.dim, slot.shard.start, slot.shard.size).copy_(rows);
      }
      all_reduce(whole);
      rows = whole;
    }
    auto it = dtypes.find(slot.name);
    c10::ScalarType dtype =
        it != dtypes.end() ? it->second : transport::to_scalar_type(config_.torch_dtype);
    out[slot.name] = transport::sha256_hex(rows.to(dtype));
  }
  return out;
}

}  // namespace hotswap::model_loader
