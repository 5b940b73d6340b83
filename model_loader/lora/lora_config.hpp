// LoraConfig: what PEFT's adapter_config.json says of a LoRA adapter, read and checked as vLLM
// checks it before serving one (its PEFTHelper): a LoRA (`peft_type`), its rank `r` within
// --max-lora-rank, `lora_alpha` and rsLoRA for the scaling, and, refused by name, what neither
// vLLM nor hotswap serves (`modules_to_save`, DoRA, adapter biases, per-module ranks). Which
// modules it adapts is read from its tensors (LoraAdapter), as vLLM reads them; `target_modules`
// is kept for what it says. No libtorch here.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace hotswap::model_loader {

// vLLM's --max-lora-rank default.
inline constexpr std::int64_t kDefaultMaxLoraRank = 16;

struct LoraConfig {
  std::int64_t rank = 0;  // r
  double alpha = 0;       // lora_alpha
  bool use_rslora = false;
  nlohmann::json target_modules;  // a list of module names, or a pattern, as PEFT wrote it

  // What B·A is scaled by: lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA (PEFT's rule).
  double scaling() const;

  // Reads an adapter_config.json's object. A ValueError naming the field for what is missing,
  // malformed or refused, and vLLM's message for a rank past `max_rank`.
  static LoraConfig from_json(const nlohmann::json& config, std::int64_t max_rank);
  // adapter_config.json in `directory`, bounded as config.json is; errors name the file.
  static LoraConfig load(const std::filesystem::path& directory, std::int64_t max_rank);
  // The fields it keeps, as adapter_config.json has them: from_json reads back the same config
  // (what rank 0 hands the other tensor-parallel ranks for an adapter's round).
  nlohmann::json to_json() const;
};

}  // namespace hotswap::model_loader
