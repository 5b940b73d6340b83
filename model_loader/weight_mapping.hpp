// WeightMapping: how a model's checkpoint-format (Hugging Face) tensors map onto its runtime
// parameters, vLLM's `stacked_params_mapping`. Each architecture family builds its own (the
// Llama family's: q_proj/k_proj/v_proj are rows of a fused `qkv_proj`, gate_proj/up_proj rows
// of a fused `gate_up_proj`, everything else 1:1); the parameter store, layerwise reload and the
// synthetic checkpoint writer read any of them. `rotary_emb.inv_freq` is always skipped (it is
// computed, not loaded).
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

namespace hotswap::model_loader {

struct RuntimeParam {
  std::string name;  // vLLM's runtime name, e.g. model.layers.0.self_attn.qkv_proj.weight
  std::vector<std::int64_t> shape;
  int group = 0;
  bool quantizable = false;  // a linear layer's weight, which int8 quantization applies to
};

// The part of a checkpoint tensor one tensor-parallel rank keeps: `size` entries of dimension
// `dim` from `start`, as vLLM's parallel layers slice each full tensor they are handed
// (column-parallel: output rows; row-parallel: input columns; vocab-parallel: vocabulary rows).
// dim -1: the whole tensor (tp = 1, and the layers every rank holds whole: norms, the router).
struct ShardRange {
  int dim = -1;
  std::int64_t start = 0;
  std::int64_t size = 0;

  // Whether this rank contributes the range when the ranks put a tensor back together: false
  // on all but the first of the ranks that hold the same range (a replicated KV head).
  bool primary = true;

  bool whole() const { return dim < 0; }
};

// One rank of a tensor-parallel group, and how it splits a dimension.
struct TensorParallelRank {
  int rank = 0;
  int size = 1;
  // vLLM's --enable-expert-parallel: a sparse layer's experts are spread over the ranks whole,
  // instead of every rank holding a slice of each expert's width.
  bool expert_parallel = false;

  // An even split of `n` entries of dimension `dim` (n divisible by size, checked by the
  // caller); whole when size is 1.
  ShardRange split(int dim, std::int64_t n) const;
  // The vocabulary split: as even as it goes, the first `n % size` ranks one row longer.
  ShardRange split_vocab(std::int64_t n) const;
  // The experts of `n` this rank holds, as [first, first + count): vLLM's expert map under
  // expert parallelism (as even as it goes, the first `n % size` ranks one more), else all.
  struct Experts {
    std::int64_t first = 0, count = 0;
    bool holds(std::int64_t expert) const { return expert >= first && expert < first + count; }
  };
  Experts local_experts(std::int64_t n) const;
};

struct CheckpointSlot {
  std::string name;  // Hugging Face name, e.g. model.layers.0.self_attn.k_proj.weight
  std::vector<std::int64_t> shape;  // of the whole checkpoint tensor, as it arrives
  std::size_t param = 0;            // index into runtime_params()
  std::int64_t row_offset = 0;      // first row of the runtime parameter this tensor fills
  int group = 0;
  ShardRange shard;  // what of the checkpoint tensor this rank keeps

  // `shape` with the shard applied: the part of the runtime parameter this tensor fills.
  std::vector<std::int64_t> kept_shape() const;
};

class WeightMapping {
 public:
  explicit WeightMapping(int num_groups);

  // Building one. A runtime parameter, then the checkpoint tensors that fill it (each from
  // `row_offset` on); add_plain is a parameter filled whole by a tensor of the same name.
  std::size_t add_param(std::string name, std::vector<std::int64_t> shape, int group,
                        bool quantizable);
  // A sharded slot keeps only `shard` of the tensor; the runtime parameter is sized for what
  // its slots keep. add_plain's parameter is the kept part of a tensor of `shape`.
  void add_slot(std::string name, std::vector<std::int64_t> shape, std::size_t param,
                std::int64_t row_offset, ShardRange shard = {});
  void add_plain(const std::string& name, std::vector<std::int64_t> shape, int group,
                 bool quantizable = false, ShardRange shard = {});
  // A name a checkpoint may carry that the model ignores (a tied lm_head.weight).
  void add_skipped(std::string name);

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
  int num_groups_;
  std::vector<std::string> skipped_;
  std::vector<RuntimeParam> params_;
  std::vector<CheckpointSlot> slots_;
  std::map<std::string, std::size_t, std::less<>> slot_index_;
  std::map<std::string, std::size_t, std::less<>> param_index_;
  std::vector<std::vector<std::size_t>> group_slots_;
  std::vector<std::vector<std::size_t>> param_slots_;
};

}  // namespace hotswap::model_loader
