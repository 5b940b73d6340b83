#include "model_loader/lora/lora_config.hpp"

#include <cmath>

#include "model_loader/model_config.hpp"
#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::model_loader {
namespace {

using nlohmann::json;

// Whether `key` is there with something in it: neither null, false, "" nor an empty list or
// object (PEFT writes the defaults of what an adapter does not use that way).
bool set(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return false;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_string() || it->is_array() || it->is_object()) return !it->empty();
  return true;
}

}  // namespace

double LoraConfig::scaling() const {
  const double r = static_cast<double>(rank);
  return use_rslora ? alpha / std::sqrt(r) : alpha / r;
}

LoraConfig LoraConfig::from_json(const json& config, std::int64_t max_rank) {
  if (!config.is_object()) {
    throw protocol::ValueError("is not a JSON object: " + protocol::describe_json(config));
  }
  if (auto type = config.find("peft_type"); type != config.end() && !type->is_null()) {
    if (!type->is_string() || type->get<std::string>() != "LORA") {
      throw protocol::ValueError("`peft_type` is " + protocol::describe_json(*type) +
                                 ": only LoRA adapters (\"LORA\") are served");
    }
  }
  LoraConfig out;
  out.rank = config_field::positive_int(config, "r", std::nullopt, config_field::kMaxWidth);
  // PEFT's default where an adapter does not say.
  out.alpha = config_field::positive_number(config, "lora_alpha", 8.0);
  out.use_rslora = config_field::flag(config, "use_rslora", false);
  if (auto targets = config.find("target_modules"); targets != config.end())
    out.target_modules = *targets;

  // What neither vLLM nor hotswap serves, by name (vLLM's PEFTHelper refuses the first three).
  if (set(config, "modules_to_save")) {
    throw protocol::ValueError(
        "`modules_to_save` is " + config["modules_to_save"].dump() +
        ": adapters that replace whole modules are not served (vLLM only supports "
        "modules_to_save being None)");
  }
  if (set(config, "use_dora")) {
    throw protocol::ValueError("`use_dora` is set: DoRA adapters are not served (nor by vLLM)");
  }
  if (auto bias = config.find("bias");
      (bias != config.end() && !bias->is_null() && *bias != "none") || set(config, "lora_bias")) {
    throw protocol::ValueError("the adapter trains biases (`bias` " +
                               protocol::describe_json(config.value("bias", json("none"))) +
                               ", `lora_bias`): adapter biases are not served");
  }
  for (const char* pattern : {"rank_pattern", "alpha_pattern"}) {
    if (set(config, pattern)) {
      throw protocol::ValueError(std::string("`") + pattern +
                                 "` gives some modules a rank or alpha of their own: every "
                                 "module must share `r` and `lora_alpha`");
    }
  }
  if (set(config, "fan_in_fan_out")) {
    throw protocol::ValueError(
        "`fan_in_fan_out` is set (weights stored transposed, for Conv1D layers): the Llama "
        "family's projections are linear layers");
  }
  if (out.rank > max_rank) {
    throw protocol::ValueError("LoRA rank " + std::to_string(out.rank) +
                               " is greater than max_lora_rank " + std::to_string(max_rank) + ".");
  }
  return out;
}

json LoraConfig::to_json() const {
  return {{"peft_type", "LORA"},
          {"r", rank},
          {"lora_alpha", alpha},
          {"use_rslora", use_rslora},
          {"target_modules", target_modules}};
}

LoraConfig LoraConfig::load(const std::filesystem::path& directory, std::int64_t max_rank) {
  const auto path = directory / "adapter_config.json";
  const json config = read_json_file(path);
  try {
    return from_json(config, max_rank);
  } catch (const protocol::ValueError& e) {
    throw protocol::ValueError(path.string() + ": " + e.what());
  }
}

}  // namespace hotswap::model_loader
