// Standard (RFC 4648) base64, strict: the alphabet A–Z a–z 0–9 + /, length a multiple of four,
// '=' padding only at the end. URL-safe text and stray whitespace are rejected, as Python's
// `base64.b64decode(s, validate=True)` rejects them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hotswap::protocol {

std::string base64_encode(std::span<const std::uint8_t> bytes);

// The decoded bytes, or nullopt when `text` is not strict standard base64.
std::optional<std::vector<std::uint8_t>> base64_decode(std::string_view text);

}  // namespace hotswap::protocol
