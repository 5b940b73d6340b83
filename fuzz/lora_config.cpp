// A LoRA adapter's config: adapter_config.json read from an adapter directory, or the
// `lora_config` of an adapter's round. An accepted config scales every update the worker adds,
// so its rank is within the bound and its scaling positive and finite; and the config it hands
// the other tensor-parallel ranks (to_json) must read back the same.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.hpp"
#include "model_loader/lora/lora_config.hpp"
#include "protocol/bounded_json.hpp"
#include "protocol/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using hotswap::model_loader::LoraConfig;
  constexpr std::int64_t kMaxRank = 64;
  auto parsed = hotswap::protocol::parse_bounded_json(hotswap::fuzz::as_text(data, size));
  if (!parsed.ok()) return 0;
  std::optional<LoraConfig> config;
  try {
    config = LoraConfig::from_json(parsed.value, kMaxRank);
  } catch (const hotswap::protocol::Error& e) {
    hotswap::fuzz::check_error_reply(e);
    return 0;
  }
  const LoraConfig& c = *config;
  HOTSWAP_FUZZ_CHECK(c.rank >= 1 && c.rank <= kMaxRank);
  HOTSWAP_FUZZ_CHECK(std::isfinite(c.alpha) && c.alpha > 0.0);
  HOTSWAP_FUZZ_CHECK(std::isfinite(c.scaling()) && c.scaling() > 0.0);

  const LoraConfig back = LoraConfig::from_json(c.to_json(), kMaxRank);
  HOTSWAP_FUZZ_CHECK(back.rank == c.rank && back.alpha == c.alpha &&
                     back.use_rslora == c.use_rslora && back.target_modules == c.target_modules);
  return 0;
}
