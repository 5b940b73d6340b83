// ModelConfig: the fields of a Hugging Face `config.json` that change the math of a
// Llama-family model, for LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and
// Qwen3ForCausalLM. Both spellings transformers has used are read: `rope_theta` +
// `rope_scaling` + `torch_dtype` (v4) and `rope_parameters` + `dtype` (v5). An unsupported
// architecture or value is a ValueError naming it, never a silently different model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "protocol/dtype.hpp"

namespace hotswap::model_loader {

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3 };

// Llama 3.1's frequency-dependent RoPE scaling (`rope_type: llama3`).
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
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

  static ModelConfig from_json(const nlohmann::json& config);
  // Reads `<directory>/config.json`.
  static ModelConfig load(const std::filesystem::path& directory);
  // A Hugging Face config.json for this model (transformers v4 spelling, read by v4 and v5).
  nlohmann::json to_json() const;

  std::string_view architecture_name() const;  // "LlamaForCausalLM", ...
  std::int64_t q_size() const { return num_attention_heads * head_dim; }
  std::int64_t kv_size() const { return num_key_value_heads * head_dim; }
};

// "llama" → kLlama, ...: the names hotswap-make-model takes.
Architecture architecture_from_short_name(std::string_view name);
// kLlama → "LlamaForCausalLM", ...: the names config.json lists.
std::string_view architecture_hf_name(Architecture architecture);

}  // namespace hotswap::model_loader
