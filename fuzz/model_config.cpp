// A model's config.json. An accepted config sizes every tensor the worker allocates, so each
// size is positive and each float finite; and the config it writes must read back the same.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.hpp"
#include "model_loader/model_config.hpp"
#include "protocol/bounded_json.hpp"
#include "protocol/errors.hpp"

namespace {

bool positive_finite(double x) {
  return std::isfinite(x) && x > 0.0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using hotswap::model_loader::ModelConfig;
  auto parsed = hotswap::protocol::parse_bounded_json(hotswap::fuzz::as_text(data, size));
  if (!parsed.ok()) return 0;
  std::optional<ModelConfig> config;
  try {
    config = ModelConfig::from_json(parsed.value);
  } catch (const hotswap::protocol::Error& e) {
    hotswap::fuzz::check_error_reply(e);
    return 0;
  }
  const ModelConfig& c = *config;
  HOTSWAP_FUZZ_CHECK(c.hidden_size > 0);
  HOTSWAP_FUZZ_CHECK(c.intermediate_size > 0);
  HOTSWAP_FUZZ_CHECK(c.num_hidden_layers > 0);
  HOTSWAP_FUZZ_CHECK(c.num_attention_heads > 0);
  HOTSWAP_FUZZ_CHECK(c.num_key_value_heads > 0);
  HOTSWAP_FUZZ_CHECK(c.num_attention_heads % c.num_key_value_heads == 0);
  HOTSWAP_FUZZ_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0);
  HOTSWAP_FUZZ_CHECK(c.vocab_size > 0);
  HOTSWAP_FUZZ_CHECK(c.max_position_embeddings > 0);
  HOTSWAP_FUZZ_CHECK(!c.sliding_window || *c.sliding_window > 0);
  HOTSWAP_FUZZ_CHECK(positive_finite(c.rope_theta));
  HOTSWAP_FUZZ_CHECK(positive_finite(c.rms_norm_eps));
  if (c.rope_scaling) {
    HOTSWAP_FUZZ_CHECK(positive_finite(c.rope_scaling->factor));
    HOTSWAP_FUZZ_CHECK(positive_finite(c.rope_scaling->low_freq_factor));
    HOTSWAP_FUZZ_CHECK(positive_finite(c.rope_scaling->high_freq_factor));
    HOTSWAP_FUZZ_CHECK(c.rope_scaling->low_freq_factor < c.rope_scaling->high_freq_factor);
    HOTSWAP_FUZZ_CHECK(c.rope_scaling->original_max_position_embeddings > 0);
  }
  // The products the model allocates by must not overflow.
  std::int64_t product = 0;
  HOTSWAP_FUZZ_CHECK(!__builtin_mul_overflow(c.num_attention_heads, c.head_dim, &product));
  HOTSWAP_FUZZ_CHECK(!__builtin_mul_overflow(c.vocab_size, c.hidden_size, &product));

  // What to_json() writes is a config from_json() accepts, and it describes the same model.
  const nlohmann::json written = c.to_json();
  const nlohmann::json again = hotswap::fuzz::must_succeed(
      "from_json(to_json())", [&] { return ModelConfig::from_json(written).to_json(); });
  HOTSWAP_FUZZ_CHECK(again == written);
  return 0;
}
