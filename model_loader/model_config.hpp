// ModelConfig: the fields of a Hugging Face `config.json` that change the math of a decoder-only
// transformer. This file reads the fields every architecture shares; the architecture named by
// `architectures[0]` reads or rules over the rest (Qwen2's biases, Mistral's window) from its own
// file (architecture_registry.hpp). Both spellings transformers has used are read: `rope_theta` +
// `rope_scaling` + `torch_dtype` (v4) and `rope_parameters` + `dtype` (v5). An unsupported
// architecture or value is a ValueError naming it, never a silently different model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/dtype.hpp"

namespace hotswap::model_loader {

// Llama 3.1's frequency-dependent RoPE scaling (`rope_type: llama3`).
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture = "LlamaForCausalLM";  // `architectures[0]`
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;  // hidden_size / num_attention_heads unless given
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<Llama3RopeScaling> rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;                       // Qwen2 always; Llama/Mistral with attention_bias
  bool o_proj_bias = false;                    // Llama/Mistral with attention_bias
  bool qk_norm = false;                        // Qwen3's per-head RMSNorm on q and k
  std::optional<std::int64_t> sliding_window;  // Mistral's, when set
  protocol::DType torch_dtype = protocol::DType::kFloat32;
  // `eos_token_id` (one id or a list): completions stop there unless asked to ignore it.
  std::vector<std::int64_t> eos_token_ids;

  // Mixture of experts (num_experts > 0): the MLP of each sparse layer is `num_experts` experts
  // of width moe_intermediate_size, of which a router picks `num_experts_per_tok` per token.
  std::int64_t num_experts = 0;
  std::int64_t num_experts_per_tok = 0;
  std::int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;                // rescale the picked experts' weights to sum to 1
  bool router_weights_float32 = false;        // Mixtral: expert outputs scaled in float32
  std::int64_t decoder_sparse_step = 1;       // Qwen3-MoE: every n-th layer is sparse
  std::vector<std::int64_t> mlp_only_layers;  // Qwen3-MoE: layers that keep a dense MLP

  static ModelConfig from_json(const nlohmann::json& config);
  // Reads `<directory>/config.json`.
  static ModelConfig load(const std::filesystem::path& directory);
  // A Hugging Face config.json for this model (transformers v4 spelling, read by v4 and v5).
  nlohmann::json to_json() const;

  const std::string& architecture_name() const { return architecture; }
  std::int64_t q_size() const { return num_attention_heads * head_dim; }
  std::int64_t kv_size() const { return num_key_value_heads * head_dim; }
  // Whether decoder layer `layer` has experts instead of a dense MLP (Qwen3-MoE's rule, which
  // Mixtral's all-sparse layers satisfy too).
  bool is_moe_layer(std::int64_t layer) const;
};

// Readers of one config.json field, for the architecture files: a missing or null field takes
// the fallback; a wrong one is a ValueError naming the key and what it held.
namespace config_field {
// Upper bounds far beyond any released model, so that a typo (vocab_size 2^40) is refused by
// name here instead of failing as an allocation deep inside libtorch.
inline constexpr std::int64_t kMaxWidth = 1 << 20;        // hidden, intermediate, head_dim
inline constexpr std::int64_t kMaxCount = 1 << 12;        // layers, heads, experts
inline constexpr std::int64_t kMaxVocab = 1 << 24;        // 16.7M tokens (the largest are ~260K)
inline constexpr std::int64_t kMaxPositions = 1ll << 30;  // context lengths, windows

std::int64_t positive_int(const nlohmann::json& config, const char* key,
                          std::optional<std::int64_t> fallback, std::int64_t max);
// A finite number greater than zero (epsilons, rope bases and factors).
double positive_number(const nlohmann::json& config, const char* key, double fallback);
bool flag(const nlohmann::json& config, const char* key, bool fallback);
}  // namespace config_field

// A small JSON file of a model or adapter directory (config.json, adapter_config.json): bounded
// to `max_bytes`, never a FIFO or a device, its depth bounded; a ValueError naming the file when
// it cannot be read or is not JSON.
nlohmann::json read_json_file(const std::filesystem::path& path,
                              std::size_t max_bytes = std::size_t{16} << 20);

}  // namespace hotswap::model_loader
