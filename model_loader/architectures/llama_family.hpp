// The Llama family of architectures as the registry knows them: the dense Llama, Mistral, Qwen2
// and Qwen3, and the mixtures of experts built on them, Qwen3-MoE and Mixtral. Their config.json
// names and rules, their checkpoint layout (fused qkv_proj and gate_up_proj; experts fused into
// vLLM's w13_weight [E, 2·I, H] and w2_weight [E, H, I]), and the helpers its model reads them
// with (llama_model.cpp). No libtorch here, so that config.json can be read, and checkpoints laid
// out, without the model code.
#pragma once

#include <cstdint>
#include <string_view>

#include "model_loader/architectures/families.hpp"
#include "model_loader/model_config.hpp"
#include "model_loader/weight_mapping.hpp"

namespace hotswap::model_loader {

// The names config.json's `architectures` gives the family.
namespace architectures {
inline constexpr std::string_view kLlama = "LlamaForCausalLM";
inline constexpr std::string_view kMistral = "MistralForCausalLM";
inline constexpr std::string_view kQwen2 = "Qwen2ForCausalLM";
inline constexpr std::string_view kQwen3 = "Qwen3ForCausalLM";
inline constexpr std::string_view kQwen3Moe = "Qwen3MoeForCausalLM";
inline constexpr std::string_view kMixtral = "MixtralForCausalLM";
}  // namespace architectures

// How checkpoints and vLLM name a sparse layer's parts: the block holding the router and the
// experts, and each expert's gate, up and down projections.
struct MoeNames {
  std::string_view block, gate, up, down;
};
// Mixtral: block_sparse_moe with w1, w3, w2; Qwen3-MoE: mlp with gate_proj, up_proj, down_proj.
MoeNames moe_names(const ModelConfig& config);

// register_llama_family (its architectures) and create_llama_model (a LlamaModel with
// uninitialized weights, defined with the model) are declared with every family's, in
// families.hpp.

// The family's checkpoint tensors and how they fill its fused runtime parameters, on one rank
// of `tp` as vLLM shards them: qkv_proj and gate_up_proj column-parallel (each of q, k, v, gate
// and up split by output rows, by whole heads; KV heads replicated where there are fewer than
// ranks), o_proj and down_proj row-parallel (split by input columns), embed_tokens and lm_head
// vocab-parallel (split by vocabulary rows); experts split by their intermediate columns (every
// rank holds every expert's slice), the router and the norms whole. A ValueError when the
// config cannot be split `tp.size` ways (check_tensor_parallel).
WeightMapping llama_weight_mapping(const ModelConfig& config, TensorParallelRank tp = {});

// How `config`'s heads split over `tp_size` ranks: each rank's query heads and KV heads.
struct HeadSplit {
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t first_kv_head = 0;  // the first of this rank's KV heads in the whole model
};
HeadSplit split_heads(const ModelConfig& config, TensorParallelRank tp);

// A ValueError naming the dimension when `config` cannot be split over `tp_size` ranks (with
// expert parallelism, experts are spread whole: their width need not split, their count must
// reach tp_size).
void check_tensor_parallel(const ModelConfig& config, int tp_size, bool expert_parallel = false);

}  // namespace hotswap::model_loader
