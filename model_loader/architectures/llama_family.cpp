#include "model_loader/architectures/llama_family.hpp"

#include "model_loader/architecture_registry.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader {
namespace {

void reject_sliding_window(const nlohmann::json& config) {
  if (config_field::flag(config, "use_sliding_window", false)) {
    throw protocol::ValueError("use_sliding_window=true is not supported");
  }
}

// Llama and Mistral: `attention_bias` puts a bias on q/k/v and o alike; `sliding_window`, when
// set, limits how far back attention looks.
void read_llama(const nlohmann::json& config, ModelConfig& out) {
  out.qkv_bias = out.o_proj_bias = config_field::flag(config, "attention_bias", false);
  if (auto w = config.find("sliding_window"); w != config.end() && !w->is_null()) {
    out.sliding_window = config_field::positive_int(config, "sliding_window", std::nullopt,
                                                    config_field::kMaxPositions);
  }
}

void write_llama(const ModelConfig& c, nlohmann::json& out) {
  out["attention_bias"] = c.qkv_bias;
  if (c.sliding_window) out["sliding_window"] = *c.sliding_window;
}

}  // namespace

WeightMapping llama_weight_mapping(const ModelConfig& c) {
  WeightMapping m(static_cast<int>(c.num_hidden_layers) + 2);
  const std::int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), i = c.intermediate_size;

  m.add_plain("model.embed_tokens.weight", {c.vocab_size, h}, 0);
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const int g = layer + 1;
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    m.add_plain(p + "input_layernorm.weight", {h}, g);

    std::size_t qkv = m.add_param(p + "self_attn.qkv_proj.weight", {q + 2 * kv, h}, g, true);
    m.add_slot(p + "self_attn.q_proj.weight", {q, h}, qkv, 0);
    m.add_slot(p + "self_attn.k_proj.weight", {kv, h}, qkv, q);
    m.add_slot(p + "self_attn.v_proj.weight", {kv, h}, qkv, q + kv);
    if (c.qkv_bias) {
      std::size_t bias = m.add_param(p + "self_attn.qkv_proj.bias", {q + 2 * kv}, g, false);
      m.add_slot(p + "self_attn.q_proj.bias", {q}, bias, 0);
      m.add_slot(p + "self_attn.k_proj.bias", {kv}, bias, q);
      m.add_slot(p + "self_attn.v_proj.bias", {kv}, bias, q + kv);
    }
    m.add_plain(p + "self_attn.o_proj.weight", {h, q}, g, true);
    if (c.o_proj_bias) m.add_plain(p + "self_attn.o_proj.bias", {h}, g);
    if (c.qk_norm) {
      m.add_plain(p + "self_attn.q_norm.weight", {c.head_dim}, g);
      m.add_plain(p + "self_attn.k_norm.weight", {c.head_dim}, g);
    }
    m.add_plain(p + "post_attention_layernorm.weight", {h}, g);

    std::size_t gate_up = m.add_param(p + "mlp.gate_up_proj.weight", {2 * i, h}, g, true);
    m.add_slot(p + "mlp.gate_proj.weight", {i, h}, gate_up, 0);
    m.add_slot(p + "mlp.up_proj.weight", {i, h}, gate_up, i);
    m.add_plain(p + "mlp.down_proj.weight", {h, i}, g, true);
  }
  const int last = m.num_groups() - 1;
  m.add_plain("model.norm.weight", {h}, last);
  if (c.tie_word_embeddings) {
    m.add_skipped("lm_head.weight");  // the embeddings serve as lm_head
  } else {
    m.add_plain("lm_head.weight", {c.vocab_size, h}, last);
  }
  return m;
}

void register_llama_family(ArchitectureRegistry& registry) {
  registry.add(Architecture{std::string(architectures::kLlama), "llama", read_llama, write_llama,
                            llama_weight_mapping, create_llama_model});
  registry.add(Architecture{std::string(architectures::kMistral), "mistral", read_llama,
                            [](const ModelConfig& c, nlohmann::json& out) {
                              write_llama(c, out);
                              // Mistral's config always carries the key; null is "no window".
                              if (!c.sliding_window) out["sliding_window"] = nullptr;
                            },
                            llama_weight_mapping, create_llama_model});
  registry.add(Architecture{std::string(architectures::kQwen2), "qwen2",
                            [](const nlohmann::json& config, ModelConfig& out) {
                              reject_sliding_window(config);
                              // Qwen2 always has q/k/v biases and never an o_proj bias.
                              out.qkv_bias = true;
                            },
                            [](const ModelConfig&, nlohmann::json&) {}, llama_weight_mapping,
                            create_llama_model});
  registry.add(Architecture{
      std::string(architectures::kQwen3), "qwen3",
      [](const nlohmann::json& config, ModelConfig& out) {
        reject_sliding_window(config);
        out.qkv_bias = out.o_proj_bias = config_field::flag(config, "attention_bias", false);
        out.qk_norm = true;  // per-head RMSNorm on q and k
      },
      [](const ModelConfig& c, nlohmann::json& out) { out["attention_bias"] = c.qkv_bias; },
      llama_weight_mapping, create_llama_model});
}

}  // namespace hotswap::model_loader
