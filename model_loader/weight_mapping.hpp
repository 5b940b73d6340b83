// WeightMapping: how a model's checkpoint-format (Hugging Face) tensors map onto its runtime
// parameters, vLLM's `stacked_params_mapping`: q_proj/k_proj/v_proj are rows of a fused
// `qkv_proj`, gate_proj/up_proj rows of a fused `gate_up_proj`; everything else maps 1:1.
// `rotary_emb.inv_freq` is skipped (it is computed, not loaded), and so is `lm_head.weight`
// when the embeddings are tied.
//
// Tensors are grouped by layer for layerwise reload: group 0 holds the embeddings, groups
// 1..L the decoder layers, group L+1 the final norm and lm_head (layerwise_groups' pre,
// stacks, post).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "model_loader/model_config.hpp"

namespace hotswap::model_loader {

struct RuntimeParam {
  std::string name;  // vLLM's runtime name, e.g. model.layers.0.self_attn.qkv_proj.weight
  std::vector<std::int64_t> shape;
  int group = 0;
  bool quantizable = false;  // a linear layer's weight, which int8 quantization applies to
};

struct CheckpointSlot {
  std::string name;  // Hugging Face name, e.g. model.layers.0.self_attn.k_proj.weight
  std::vector<std::int64_t> shape;
  std::size_t param = 0;        // index into runtime_params()
  std::int64_t row_offset = 0;  // first row of the runtime parameter this tensor fills
  int group = 0;
};

class WeightMapping {
 public:
  explicit WeightMapping(const ModelConfig& config);

  const std::vector<RuntimeParam>& runtime_params() const { return params_; }
  const std::vector<CheckpointSlot>& slots() const { return slots_; }
  int num_groups() const { return num_groups_; }

  // The slot a checkpoint tensor fills, or nullptr when the model has no such tensor.
  const CheckpointSlot* find(std::string_view checkpoint_name) const;
  // Names a checkpoint may carry that the model ignores.
  bool is_skipped(std::string_view checkpoint_name) const;
  // Slot indices of one group / of one runtime parameter.
  const std::vector<std::size_t>& slots_of_group(int group) const { return group_slots_[group]; }
  const std::vector<std::size_t>& slots_of_param(std::size_t param) const {
    return param_slots_[param];
  }
  std::size_t param_index(std::string_view runtime_name) const;

 private:
  std::size_t add_param(std::string name, std::vector<std::int64_t> shape, int group,
                        bool quantizable);
  void add_slot(std::string name, std::vector<std::int64_t> shape, std::size_t param,
                std::int64_t row_offset);

  bool tied_;
  int num_groups_;
  std::vector<RuntimeParam> params_;
  std::vector<CheckpointSlot> slots_;
  std::map<std::string, std::size_t, std::less<>> slot_index_;
  std::map<std::string, std::size_t, std::less<>> param_index_;
  std::vector<std::vector<std::size_t>> group_slots_;
  std::vector<std::vector<std::size_t>> param_slots_;
};

}  // namespace hotswap::model_loader
