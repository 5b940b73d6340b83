// The bounded JSON reader under every other parser: the flat scan, the raw member text that
// echoes a JSON-RPC id, and the parser with its size, depth and duplicate-key bounds. The first
// byte picks the bounds; the rest is the text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.hpp"
#include "protocol/bounded_json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hotswap;
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  const std::string_view text = fuzz::as_text(data + 1, size - 1);

  const protocol::JsonScan scan = protocol::scan_json(text);
  HOTSWAP_FUZZ_CHECK(scan.end <= text.size());
  HOTSWAP_FUZZ_CHECK(scan.too_deep == (scan.depth > protocol::kMaxJsonDepth));
  const auto id = protocol::top_level_member_text(text, "id");
  if (id) {
    HOTSWAP_FUZZ_CHECK(id->data() >= text.data() &&
                       id->data() + id->size() <= text.data() + text.size());
  }

  protocol::JsonBounds bounds{.max_bytes = (flags & 2) ? 64 : std::size_t{1} << 20,
                              .refuse_duplicate_keys = (flags & 1) != 0};
  if (flags & 4) bounds.max_depth = 4;
  const protocol::BoundedJson parsed = protocol::parse_bounded_json(text, bounds);
  HOTSWAP_FUZZ_CHECK(parsed.ok() == !parsed.value.is_discarded());
  HOTSWAP_FUZZ_CHECK(parsed.ok() == parsed.reason.empty());
  if (!parsed.ok()) return 0;

  HOTSWAP_FUZZ_CHECK(text.size() <= bounds.max_bytes);
  HOTSWAP_FUZZ_CHECK(scan.end > 0);
  HOTSWAP_FUZZ_CHECK(!scan.too_deep && scan.depth <= protocol::kMaxJsonDepth);
  // The depth bound holds for what the parser built, not only for what the scan saw: callers
  // copy, compare and print the value recursively.
  const std::size_t depth = fuzz::json_depth(parsed.value);
  HOTSWAP_FUZZ_CHECK(depth <= scan.depth);
  HOTSWAP_FUZZ_CHECK(depth <= bounds.max_depth);
  // An object's "id" (the last one, as the parser keeps) is echoed as written.
  if (parsed.value.is_object() && parsed.value.contains("id")) {
    HOTSWAP_FUZZ_CHECK(id.has_value());
    nlohmann::json reread = nlohmann::json::parse(*id, nullptr, /*allow_exceptions=*/false);
    HOTSWAP_FUZZ_CHECK(!reread.is_discarded() && reread == parsed.value.at("id"));
  } else if (parsed.value.is_object()) {
    HOTSWAP_FUZZ_CHECK(!id.has_value());
  }
  return 0;
}
