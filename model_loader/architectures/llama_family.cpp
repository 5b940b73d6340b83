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

// Qwen2 and Qwen3 never use a sliding window; Qwen3 adds per-head q/k norms.
void read_qwen3(const nlohmann::json& config, ModelConfig& out) {
  reject_sliding_window(config);
  out.qkv_bias = out.o_proj_bias = config_field::flag(config, "attention_bias", false);
  out.qk_norm = true;  // per-head RMSNorm on q and k
}

// The expert count and how many experts each token takes; the defaults are transformers'.
void read_experts(const nlohmann::json& config, ModelConfig& out, std::int64_t experts,
                  std::int64_t per_token) {
  using namespace config_field;
  // transformers v5 spells Qwen3-MoE's `num_experts` as `num_local_experts`, Mixtral's name.
  const char* count = config.contains("num_local_experts") ? "num_local_experts" : "num_experts";
  out.num_experts = positive_int(config, count, experts, kMaxCount);
  out.num_experts_per_tok = positive_int(config, "num_experts_per_tok", per_token, kMaxCount);
  if (out.num_experts_per_tok > out.num_experts) {
    throw protocol::ValueError("num_experts_per_tok " + std::to_string(out.num_experts_per_tok) +
                               " is more than the " + std::to_string(out.num_experts) +
                               " experts of a layer");
  }
}

void read_qwen3_moe(const nlohmann::json& config, ModelConfig& out) {
  using namespace config_field;
  read_qwen3(config, out);
  read_experts(config, out, 128, 8);
  out.moe_intermediate_size = positive_int(config, "moe_intermediate_size", 768, kMaxWidth);
  out.norm_topk_prob = flag(config, "norm_topk_prob", false);
  out.decoder_sparse_step = positive_int(config, "decoder_sparse_step", 1, kMaxCount);
  if (auto it = config.find("mlp_only_layers"); it != config.end() && !it->is_null()) {
    if (!it->is_array()) {
      throw protocol::ValueError("`mlp_only_layers` must be a list of layer indices");
    }
    for (const auto& layer : *it) {
      if (!layer.is_number_integer() || layer.get<std::int64_t>() < 0 ||
          layer.get<std::int64_t>() >= out.num_hidden_layers) {
        throw protocol::ValueError("`mlp_only_layers` holds " + layer.dump() +
                                   ", which is not a layer index below num_hidden_layers " +
                                   std::to_string(out.num_hidden_layers));
      }
      out.mlp_only_layers.push_back(layer.get<std::int64_t>());
    }
  }
}

void write_qwen3_moe(const ModelConfig& c, nlohmann::json& out) {
  out["attention_bias"] = c.qkv_bias;
  out["num_experts"] = c.num_experts;
  out["num_experts_per_tok"] = c.num_experts_per_tok;
  out["moe_intermediate_size"] = c.moe_intermediate_size;
  out["norm_topk_prob"] = c.norm_topk_prob;
  out["decoder_sparse_step"] = c.decoder_sparse_step;
  out["mlp_only_layers"] = c.mlp_only_layers;
}

// Mixtral: Mistral's attention; every layer sparse, experts as wide as `intermediate_size`, the
// picked experts' weights always rescaled to sum to 1 and applied in float32.
void read_mixtral(const nlohmann::json& config, ModelConfig& out) {
  read_llama(config, out);
  read_experts(config, out, 8, 2);
  out.moe_intermediate_size = out.intermediate_size;
  out.norm_topk_prob = true;
  out.router_weights_float32 = true;
}

void write_mixtral(const ModelConfig& c, nlohmann::json& out) {
  write_llama(c, out);
  if (!c.sliding_window) out["sliding_window"] = nullptr;
  out["num_local_experts"] = c.num_experts;
  out["num_experts_per_tok"] = c.num_experts_per_tok;
}

// A sparse layer's checkpoint tensors: the router, and each expert's gate, up and down
// projections, which fill rows of the fused w13 [E, 2·I, H] (gate rows, then up rows, per
// expert) and w2 [E, H, I]. Under tensor parallelism every rank holds every expert, its I / tp
// slice: w13 [E, 2·I/tp, H], w2 [E, H, I/tp] (vLLM's fused MoE without expert parallelism).
// With expert parallelism a rank holds its local experts whole: w13 [E_r, 2·I, H], w2 [E_r, H,
// I]. Every rank still has a slot for every expert, so that all of them meet in the same
// collectives when the ranks put the checkpoint back together: another rank's expert keeps
// nothing here (an empty range, not the primary copy).
void add_experts(WeightMapping& m, const ModelConfig& c, const std::string& layer, int group,
                 TensorParallelRank tp) {
  const MoeNames names = moe_names(c);
  const std::string block = layer + std::string(names.block) + ".";
  const std::int64_t h = c.hidden_size, i = c.moe_intermediate_size, e = c.num_experts;
  const auto mine = tp.local_experts(e);
  const bool by_experts = mine.count != e;
  const std::int64_t li = by_experts ? i : i / tp.size;  // this rank's width of each expert
  m.add_plain(block + "gate.weight", {e, h}, group);
  // Not int8-quantized: the store's int8 scales are per row of a 2-D weight.
  std::size_t w13 =
      m.add_param(block + "experts.w13_weight", {mine.count, 2 * li, h}, group, false);
  std::size_t w2 = m.add_param(block + "experts.w2_weight", {mine.count, h, li}, group, false);
  for (std::int64_t x = 0; x < e; ++x) {
    const std::string expert = block + "experts." + std::to_string(x) + ".";
    ShardRange gate_up = tp.split(0, i), down = tp.split(1, i);
    std::int64_t local = x;
    if (by_experts) {
      const bool held = mine.holds(x);
      gate_up = ShardRange{0, 0, held ? i : 0, held};
      down = ShardRange{0, 0, held ? h : 0, held};
      local = held ? x - mine.first : 0;
    }
    m.add_slot(expert + std::string(names.gate) + ".weight", {i, h}, w13, local * 2 * li, gate_up);
    m.add_slot(expert + std::string(names.up) + ".weight", {i, h}, w13, local * 2 * li + li,
               gate_up);
    m.add_slot(expert + std::string(names.down) + ".weight", {h, i}, w2, local * h, down);
  }
}

}  // namespace

MoeNames moe_names(const ModelConfig& config) {
  if (config.architecture == architectures::kMixtral) {
    return {"block_sparse_moe", "w1", "w3", "w2"};
  }
  return {"mlp", "gate_proj", "up_proj", "down_proj"};
}

HeadSplit split_heads(const ModelConfig& c, TensorParallelRank tp) {
  HeadSplit split;
  split.heads = c.num_attention_heads / tp.size;
  if (c.num_key_value_heads >= tp.size) {
    split.kv_heads = c.num_key_value_heads / tp.size;
    split.first_kv_head = tp.rank * split.kv_heads;
  } else {
    // Fewer KV heads than ranks: each KV head is replicated on tp / kv_heads neighbouring ranks.
    split.kv_heads = 1;
    split.first_kv_head = tp.rank / (tp.size / c.num_key_value_heads);
  }
  return split;
}

void check_tensor_parallel(const ModelConfig& c, int tp, bool expert_parallel) {
  if (tp < 1) {
    throw protocol::ValueError("tensor_parallel_size must be at least 1, not " +
                               std::to_string(tp));
  }
  auto divisible = [&](std::int64_t n, const char* what) {
    if (n % tp != 0) {
      throw protocol::ValueError(std::string(what) + " (" + std::to_string(n) +
                                 ") must be divisible by tensor parallel size (" +
                                 std::to_string(tp) + ")");
    }
  };
  divisible(c.num_attention_heads, "Total number of attention heads");
  const std::int64_t kv = c.num_key_value_heads;
  if (kv >= tp) {
    divisible(kv, "Total number of key/value heads");
  } else if (tp % kv != 0) {
    throw protocol::ValueError("tensor parallel size (" + std::to_string(tp) +
                               ") must be a multiple of the number of key/value heads (" +
                               std::to_string(kv) + ") when it is larger");
  }
  bool dense = false, sparse = false;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
    (c.is_moe_layer(l) ? sparse : dense) = true;
  if (dense) divisible(c.intermediate_size, "intermediate_size");
  if (sparse && !expert_parallel) divisible(c.moe_intermediate_size, "moe_intermediate_size");
  if (sparse && expert_parallel && c.num_experts < tp) {
    throw protocol::ValueError("expert parallelism spreads a layer's " +
                               std::to_string(c.num_experts) + " experts over the ranks, but " +
                               "tensor parallel size (" + std::to_string(tp) + ") is larger");
  }
  if (c.vocab_size < tp) {
    throw protocol::ValueError("vocab_size (" + std::to_string(c.vocab_size) +
                               ") is smaller than tensor parallel size (" + std::to_string(tp) +
                               ")");
  }
}

WeightMapping llama_weight_mapping(const ModelConfig& c, TensorParallelRank tp) {
  check_tensor_parallel(c, tp.size, tp.expert_parallel);
  WeightMapping m(static_cast<int>(c.num_hidden_layers) + 2);
  const std::int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), i = c.intermediate_size;
  const HeadSplit heads = split_heads(c, tp);
  // This rank's rows of q, k and v (whole heads), and of gate and up.
  const std::int64_t lq = heads.heads * c.head_dim, lkv = heads.kv_heads * c.head_dim;
  const std::int64_t li = i / tp.size;
  const ShardRange q_rows = tp.split(0, q);
  const ShardRange kv_rows = tp.size == 1
                                 ? ShardRange{}
                                 : ShardRange{0, heads.first_kv_head * c.head_dim, lkv,
                                              c.num_key_value_heads >= tp.size ||
                                                  tp.rank % (tp.size / c.num_key_value_heads) == 0};
  const ShardRange vocab = tp.split_vocab(c.vocab_size);
  auto along = [](ShardRange r, int dim) {
    if (!r.whole()) r.dim = dim;
    return r;
  };

  m.add_plain("model.embed_tokens.weight", {c.vocab_size, h}, 0, false, vocab);
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const int g = layer + 1;
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    m.add_plain(p + "input_layernorm.weight", {h}, g);

    std::size_t qkv = m.add_param(p + "self_attn.qkv_proj.weight", {lq + 2 * lkv, h}, g, true);
    m.add_slot(p + "self_attn.q_proj.weight", {q, h}, qkv, 0, q_rows);
    m.add_slot(p + "self_attn.k_proj.weight", {kv, h}, qkv, lq, kv_rows);
    m.add_slot(p + "self_attn.v_proj.weight", {kv, h}, qkv, lq + lkv, kv_rows);
    if (c.qkv_bias) {
      std::size_t bias = m.add_param(p + "self_attn.qkv_proj.bias", {lq + 2 * lkv}, g, false);
      m.add_slot(p + "self_attn.q_proj.bias", {q}, bias, 0, q_rows);
      m.add_slot(p + "self_attn.k_proj.bias", {kv}, bias, lq, kv_rows);
      m.add_slot(p + "self_attn.v_proj.bias", {kv}, bias, lq + lkv, kv_rows);
    }
    m.add_plain(p + "self_attn.o_proj.weight", {h, q}, g, true, along(q_rows, 1));
    // Row-parallel biases are whole on every rank and added once, after the all-reduce.
    if (c.o_proj_bias) m.add_plain(p + "self_attn.o_proj.bias", {h}, g);
    if (c.qk_norm) {
      m.add_plain(p + "self_attn.q_norm.weight", {c.head_dim}, g);
      m.add_plain(p + "self_attn.k_norm.weight", {c.head_dim}, g);
    }
    m.add_plain(p + "post_attention_layernorm.weight", {h}, g);

    if (c.is_moe_layer(layer)) {
      add_experts(m, c, p, g, tp);
      continue;
    }
    std::size_t gate_up = m.add_param(p + "mlp.gate_up_proj.weight", {2 * li, h}, g, true);
    m.add_slot(p + "mlp.gate_proj.weight", {i, h}, gate_up, 0, tp.split(0, i));
    m.add_slot(p + "mlp.up_proj.weight", {i, h}, gate_up, li, tp.split(0, i));
    m.add_plain(p + "mlp.down_proj.weight", {h, i}, g, true, tp.split(1, i));
  }
  const int last = m.num_groups() - 1;
  m.add_plain("model.norm.weight", {h}, last);
  if (c.tie_word_embeddings) {
    m.add_skipped("lm_head.weight");  // the embeddings serve as lm_head
  } else {
    m.add_plain("lm_head.weight", {c.vocab_size, h}, last, false, vocab);
  }
  return m;
}

void register_llama_family(ArchitectureRegistry& registry) {
  auto add = [&](std::string_view name, const char* model_type, auto read, auto write) {
    registry.add(Architecture{std::string(name), model_type, read, write, llama_weight_mapping,
                              create_llama_model});
  };
  add(architectures::kLlama, "llama", read_llama, write_llama);
  add(architectures::kMistral, "mistral", read_llama,
      [](const ModelConfig& c, nlohmann::json& out) {
        write_llama(c, out);
        // Mistral's config always carries the key; null is "no window".
        if (!c.sliding_window) out["sliding_window"] = nullptr;
      });
  add(
      architectures::kQwen2, "qwen2",
      [](const nlohmann::json& config, ModelConfig& out) {
        reject_sliding_window(config);
        // Qwen2 always has q/k/v biases and never an o_proj bias.
        out.qkv_bias = true;
      },
      [](const ModelConfig&, nlohmann::json&) {});
  add(architectures::kQwen3, "qwen3", read_qwen3,
      [](const ModelConfig& c, nlohmann::json& out) { out["attention_bias"] = c.qkv_bias; });
  add(architectures::kQwen3Moe, "qwen3_moe", read_qwen3_moe, write_qwen3_moe);
  add(architectures::kMixtral, "mixtral", read_mixtral, write_mixtral);
}

}  // namespace hotswap::model_loader
