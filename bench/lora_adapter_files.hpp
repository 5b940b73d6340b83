// A random LoRA adapter for the benches: rank `rank` on the q/k/v/o and gate/up/down projections
// of every layer of a Llama-family config, its tensors under PEFT's saved names, and the same
// written in PEFT's format (adapter_config.json, adapter_model.safetensors). One place, so that
// the decode and the push benches measure the same adapter.
#pragma once

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/randn.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_loader/model_config.hpp"
#include "model_loader/safetensors_writer.hpp"

namespace hotswap::bench {

// adapter_config.json's fields for a rank-`rank` adapter of every projection.
inline nlohmann::json lora_adapter_config(std::int64_t rank) {
  return {{"peft_type", "LORA"},
          {"r", rank},
          {"lora_alpha", 2 * rank},
          {"target_modules",
           {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}};
}

// Its tensors (float32, as PEFT trains them), seeded by `seed`.
inline std::vector<std::pair<std::string, at::Tensor>> random_lora_tensors(
    const model_loader::ModelConfig& c, std::int64_t rank, std::uint64_t seed) {
  at::manual_seed(seed);
  const std::int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                     kv = c.num_key_value_heads * c.head_dim, i = c.intermediate_size;
  const std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> shapes = {
      {"self_attn.q_proj", q, h}, {"self_attn.k_proj", kv, h}, {"self_attn.v_proj", kv, h},
      {"self_attn.o_proj", h, q}, {"mlp.gate_proj", i, h},     {"mlp.up_proj", i, h},
      {"mlp.down_proj", h, i}};
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const auto& [module, out, in] : shapes) {
      const std::string name = "base_model.model.model.layers." + std::to_string(l) + "." + module;
      tensors.emplace_back(name + ".lora_A.weight", at::randn({rank, in}) * 0.01);
      tensors.emplace_back(name + ".lora_B.weight", at::randn({out, rank}) * 0.01);
    }
  }
  return tensors;
}

// Writes `tensors` of a rank-`rank` adapter in PEFT's format into `dir`.
inline void write_lora_adapter(const std::filesystem::path& dir, std::int64_t rank,
                               const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << lora_adapter_config(rank).dump();
  model_loader::save_safetensors((dir / "adapter_model.safetensors").string(), tensors);
}

}  // namespace hotswap::bench
