// The Llama family of architectures as the registry knows them: the dense Llama, Mistral, Qwen2
// and Qwen3, and the mixtures of experts built on them, Qwen3-MoE and Mixtral. Their config.json
// names and rules, their checkpoint layout (fused qkv_proj and gate_up_proj; experts fused into
// vLLM's w13_weight [E, 2·I, H] and w2_weight [E, H, I]), and the function that builds the model
// (llama_model.hpp). No libtorch here, so that config.json
// can be read, and checkpoints laid out, without the model code.
#pragma once

#include <memory>
#include <string_view>

#include "model_loader/model_config.hpp"
#include "model_loader/weight_mapping.hpp"

namespace hotswap::model_loader {

class ArchitectureRegistry;
class ServableModel;
struct ModelOptions;

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

// Adds the four architectures to `registry`.
void register_llama_family(ArchitectureRegistry& registry);

// The family's checkpoint tensors and how they fill its fused runtime parameters.
WeightMapping llama_weight_mapping(const ModelConfig& config);

// A LlamaModel with uninitialized weights (defined with the model, in llama_model.cpp).
std::shared_ptr<ServableModel> create_llama_model(const ModelConfig& config,
                                                  const ModelOptions& options);

}  // namespace hotswap::model_loader
