#include "model_loader/model_config.hpp"

#include <algorithm>
#include <cmath>

#include "model_loader/architecture_registry.hpp"
#include "model_loader/mapped_file.hpp"
#include "protocol/bounded_json.hpp"
#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"
#include "transport/posix_check.hpp"

namespace hotswap::model_loader {
namespace {

using nlohmann::json;

// Messages name the field; from_json and load say which file.
[[noreturn]] void unsupported(const std::string& what) {
  throw protocol::ValueError(what);
}

}  // namespace

namespace config_field {

std::int64_t positive_int(const json& config, const char* key, std::optional<std::int64_t> fallback,
                          std::int64_t max) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) {
    if (fallback) return *fallback;
    unsupported(std::string("`") + key + "` is required");
  }
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<std::uint64_t>() > std::uint64_t(max)) ||
      it->get<std::int64_t>() <= 0) {
    unsupported(std::string("`") + key + "` must be a positive integer, got " +
                protocol::describe_json(*it));
  }
  if (it->get<std::int64_t>() > max) {
    unsupported(std::string("`") + key + "` is " + std::to_string(it->get<std::int64_t>()) +
                ", beyond any model hotswap can serve (at most " + std::to_string(max) + ")");
  }
  return it->get<std::int64_t>();
}

double positive_number(const json& config, const char* key, double fallback) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_number() || !std::isfinite(it->get<double>()) || !(it->get<double>() > 0.0)) {
    unsupported(std::string("`") + key + "` must be a positive finite number, got " +
                protocol::describe_json(*it));
  }
  return it->get<double>();
}

bool flag(const json& config, const char* key, bool fallback) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) unsupported(std::string("`") + key + "` must be true or false");
  return it->get<bool>();
}

}  // namespace config_field

namespace {

using namespace config_field;

// `rope_scaling` (v4) or `rope_parameters` (v5): null/default, or llama3.
void read_rope(const json& config, ModelConfig& out) {
  out.rope_theta = positive_number(config, "rope_theta", 10000.0);
  const json* rope = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = config.find(key);
    if (it != config.end() && !it->is_null()) {
      rope = &*it;
      break;
    }
  }
  if (rope == nullptr) return;
  if (!rope->is_object())
    unsupported("`rope_scaling` must be an object, got " + protocol::describe_json(*rope));
  out.rope_theta = positive_number(*rope, "rope_theta", out.rope_theta);
  std::string type = "default";
  for (const char* key : {"type", "rope_type"}) {  // rope_type wins where both are given
    auto it = rope->find(key);
    if (it == rope->end() || it->is_null()) continue;
    if (!it->is_string()) unsupported("`rope_scaling." + std::string(key) + "` must be a string");
    type = it->get<std::string>();
  }
  if (type == "default") return;
  if (type != "llama3") {
    unsupported("rope type '" + type + "' is not supported (hotswap supports default and llama3)");
  }
  Llama3RopeScaling s;
  s.factor = positive_number(*rope, "factor", s.factor);
  s.low_freq_factor = positive_number(*rope, "low_freq_factor", s.low_freq_factor);
  s.high_freq_factor = positive_number(*rope, "high_freq_factor", s.high_freq_factor);
  s.original_max_position_embeddings = positive_int(
      *rope, "original_max_position_embeddings", s.original_max_position_embeddings, kMaxPositions);
  if (s.low_freq_factor >= s.high_freq_factor) {
    unsupported("llama3 rope scaling needs low_freq_factor < high_freq_factor");
  }
  out.rope_scaling = s;
}

}  // namespace

static ModelConfig parse(const json& config) {
  if (!config.is_object()) unsupported("expected a JSON object");
  ModelConfig out;
  auto archs = config.find("architectures");
  if (archs == config.end() || !archs->is_array() || archs->size() != 1 ||
      !(*archs)[0].is_string()) {
    unsupported("`architectures` must list exactly one architecture");
  }
  const Architecture& architecture =
      ArchitectureRegistry::builtin().find((*archs)[0].get<std::string>());
  out.architecture = architecture.name;

  out.hidden_size = positive_int(config, "hidden_size", std::nullopt, kMaxWidth);
  out.intermediate_size = positive_int(config, "intermediate_size", std::nullopt, kMaxWidth);
  out.num_hidden_layers = positive_int(config, "num_hidden_layers", std::nullopt, kMaxCount);
  out.num_attention_heads = positive_int(config, "num_attention_heads", std::nullopt, kMaxCount);
  out.num_key_value_heads =
      positive_int(config, "num_key_value_heads", out.num_attention_heads, kMaxCount);
  out.vocab_size = positive_int(config, "vocab_size", std::nullopt, kMaxVocab);
  out.max_position_embeddings =
      positive_int(config, "max_position_embeddings", 2048, kMaxPositions);
  if (out.num_attention_heads % out.num_key_value_heads != 0) {
    unsupported("num_attention_heads " + std::to_string(out.num_attention_heads) +
                " is not a multiple of num_key_value_heads " +
                std::to_string(out.num_key_value_heads));
  }
  if (out.hidden_size % out.num_attention_heads != 0 && !config.contains("head_dim")) {
    unsupported("hidden_size is not a multiple of num_attention_heads and no head_dim is given");
  }
  out.head_dim =
      positive_int(config, "head_dim", out.hidden_size / out.num_attention_heads, kMaxWidth);
  if (out.head_dim % 2 != 0) unsupported("head_dim must be even for rotary embeddings");
  out.rms_norm_eps = positive_number(config, "rms_norm_eps", 1e-6);
  read_rope(config, out);
  out.tie_word_embeddings = flag(config, "tie_word_embeddings", false);

  std::string act = "silu";
  if (auto it = config.find("hidden_act"); it != config.end() && !it->is_null()) {
    if (!it->is_string())
      unsupported("`hidden_act` must be a string, got " + protocol::describe_json(*it));
    act = it->get<std::string>();
  }
  if (act != "silu") unsupported("hidden_act '" + act + "' is not supported (silu is)");
  if (flag(config, "mlp_bias", false)) unsupported("mlp_bias=true is not supported");

  std::string dtype = "float32";
  for (const char* key : {"dtype", "torch_dtype"}) {
    auto it = config.find(key);
    if (it != config.end() && it->is_string()) {
      dtype = it->get<std::string>();
      break;
    }
  }
  out.torch_dtype = protocol::dtype_from_name(dtype);
  if (!protocol::is_floating_point(out.torch_dtype) || protocol::item_size(out.torch_dtype) < 2) {
    unsupported("dtype '" + dtype + "' is not supported (float32, bfloat16, float16 are)");
  }
  if (auto it = config.find("eos_token_id"); it != config.end() && !it->is_null()) {
    const json ids = it->is_array() ? *it : json::array({*it});
    for (const auto& id : ids) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0) {
        unsupported("`eos_token_id` must be a token id or a list of them, got " +
                    protocol::describe_json(*it));
      }
      out.eos_token_ids.push_back(id.get<std::int64_t>());
    }
  }
  architecture.read_config(config, out);
  return out;
}

ModelConfig ModelConfig::from_json(const json& config) {
  try {
    return parse(config);
  } catch (const protocol::ValueError& e) {
    throw protocol::ValueError(std::string("config.json: ") + e.what());
  }
}

json read_json_file(const std::filesystem::path& path, std::size_t max_bytes) {
  std::string text;
  try {
    text = read_regular_file(path.string(), max_bytes);
  } catch (const transport::PosixError& e) {
    throw protocol::ValueError("cannot read " + path.string() + ": " + e.reason());
  }
  auto parsed = protocol::parse_bounded_json(text);
  if (!parsed.ok()) throw protocol::ValueError(path.string() + " " + parsed.reason);
  return std::move(parsed.value);
}

ModelConfig ModelConfig::load(const std::filesystem::path& directory) {
  auto path = directory / "config.json";
  const json config = read_json_file(path);  // a config is a few KB
  try {
    return parse(config);
  } catch (const protocol::ValueError& e) {
    throw protocol::ValueError(path.string() + ": " + e.what());
  }
}

bool ModelConfig::is_moe_layer(std::int64_t layer) const {
  if (num_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) {
    return false;
  }
  return (layer + 1) % decoder_sparse_step == 0;
}

json ModelConfig::to_json() const {
  json out = {
      {"architectures", {architecture_name()}},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"vocab_size", vocab_size},
      {"max_position_embeddings", max_position_embeddings},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
      {"tie_word_embeddings", tie_word_embeddings},
      {"hidden_act", "silu"},
      {"torch_dtype", protocol::dtype_name(torch_dtype)},
      {"bos_token_id", 1},
  };
  out["eos_token_id"] = eos_token_ids.empty()       ? json(2)
                        : eos_token_ids.size() == 1 ? json(eos_token_ids.front())
                                                    : json(eos_token_ids);
  const Architecture& family = ArchitectureRegistry::builtin().find(architecture);
  out["model_type"] = family.model_type;
  if (rope_scaling) {
    out["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", rope_scaling->factor},
        {"low_freq_factor", rope_scaling->low_freq_factor},
        {"high_freq_factor", rope_scaling->high_freq_factor},
        {"original_max_position_embeddings", rope_scaling->original_max_position_embeddings}};
  }
  family.write_config(*this, out);
  return out;
}

}  // namespace hotswap::model_loader
