#include "model_loader/weight_mapping.hpp"

#include "protocol/errors.hpp"

namespace hotswap::model_loader {

std::size_t WeightMapping::add_param(std::string name, std::vector<std::int64_t> shape, int group,
                                     bool quantizable) {
  param_index_.emplace(name, params_.size());
  params_.push_back(RuntimeParam{std::move(name), std::move(shape), group, quantizable});
  param_slots_.emplace_back();
  return params_.size() - 1;
}

void WeightMapping::add_slot(std::string name, std::vector<std::int64_t> shape, std::size_t param,
                             std::int64_t row_offset) {
  int group = params_[param].group;
  slot_index_.emplace(name, slots_.size());
  group_slots_[group].push_back(slots_.size());
  param_slots_[param].push_back(slots_.size());
  slots_.push_back(CheckpointSlot{std::move(name), std::move(shape), param, row_offset, group});
}

WeightMapping::WeightMapping(const ModelConfig& c)
    : tied_(c.tie_word_embeddings), num_groups_(static_cast<int>(c.num_hidden_layers) + 2) {
  group_slots_.resize(num_groups_);
  const std::int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), i = c.intermediate_size;

  // One runtime parameter filled whole by one checkpoint tensor of the same name.
  auto plain = [&](const std::string& name, std::vector<std::int64_t> shape, int group,
                   bool quantizable = false) {
    std::size_t p = add_param(name, shape, group, quantizable);
    add_slot(name, std::move(shape), p, 0);
  };

  plain("model.embed_tokens.weight", {c.vocab_size, h}, 0);
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const int g = layer + 1;
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    plain(p + "input_layernorm.weight", {h}, g);

    std::size_t qkv = add_param(p + "self_attn.qkv_proj.weight", {q + 2 * kv, h}, g, true);
    add_slot(p + "self_attn.q_proj.weight", {q, h}, qkv, 0);
    add_slot(p + "self_attn.k_proj.weight", {kv, h}, qkv, q);
    add_slot(p + "self_attn.v_proj.weight", {kv, h}, qkv, q + kv);
    if (c.qkv_bias) {
      std::size_t bias = add_param(p + "self_attn.qkv_proj.bias", {q + 2 * kv}, g, false);
      add_slot(p + "self_attn.q_proj.bias", {q}, bias, 0);
      add_slot(p + "self_attn.k_proj.bias", {kv}, bias, q);
      add_slot(p + "self_attn.v_proj.bias", {kv}, bias, q + kv);
    }
    plain(p + "self_attn.o_proj.weight", {h, q}, g, true);
    if (c.o_proj_bias) plain(p + "self_attn.o_proj.bias", {h}, g);
    if (c.qk_norm) {
      plain(p + "self_attn.q_norm.weight", {c.head_dim}, g);
      plain(p + "self_attn.k_norm.weight", {c.head_dim}, g);
    }
    plain(p + "post_attention_layernorm.weight", {h}, g);

    std::size_t gate_up = add_param(p + "mlp.gate_up_proj.weight", {2 * i, h}, g, true);
    add_slot(p + "mlp.gate_proj.weight", {i, h}, gate_up, 0);
    add_slot(p + "mlp.up_proj.weight", {i, h}, gate_up, i);
    plain(p + "mlp.down_proj.weight", {h, i}, g, true);
  }
  const int last = num_groups_ - 1;
  plain("model.norm.weight", {h}, last);
  if (!tied_) plain("lm_head.weight", {c.vocab_size, h}, last);
}

const CheckpointSlot* WeightMapping::find(std::string_view checkpoint_name) const {
  auto it = slot_index_.find(checkpoint_name);
  return it == slot_index_.end() ? nullptr : &slots_[it->second];
}

bool WeightMapping::is_skipped(std::string_view name) const {
  if (name.ends_with("rotary_emb.inv_freq")) return true;
  return tied_ && name == "lm_head.weight";
}

std::size_t WeightMapping::param_index(std::string_view runtime_name) const {
  auto it = param_index_.find(runtime_name);
  if (it == param_index_.end()) {
    throw protocol::ValueError("no runtime parameter '" + std::string(runtime_name) + "'");
  }
  return it->second;
}

}  // namespace hotswap::model_loader
