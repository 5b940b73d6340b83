// Strict standard base64, as NCCL unique ids and CUDA IPC handles travel in JSON. Decoding
// accepts exactly the canonical text of some bytes, up to the unused low bits of the last
// character before the padding (which Python's b64decode(validate=True) ignores as well).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "protocol/base64.hpp"

namespace {

int sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// `text` was accepted and `canonical` is the encoding of what it decoded to: they may differ
// only in the bits of the last data character that carry no byte.
bool same_but_unused_bits(std::string_view text, std::string_view canonical) {
  if (text.size() != canonical.size()) return false;
  std::size_t padding = 0;
  while (padding < canonical.size() && canonical[canonical.size() - 1 - padding] == '=')
    ++padding;
  if (padding == 0) return text == canonical;
  const std::size_t last = canonical.size() - 1 - padding;
  if (text.substr(0, last) != canonical.substr(0, last)) return false;
  if (text.substr(last + 1) != canonical.substr(last + 1)) return false;
  const int unused_mask = padding == 1 ? 0x03 : 0x0f;  // 2 or 4 bits carry nothing
  const int a = sextet(text[last]), b = sextet(canonical[last]);
  return a >= 0 && b >= 0 && (a & ~unused_mask) == (b & ~unused_mask);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hotswap;
  const std::string_view text = fuzz::as_text(data, size);
  if (auto decoded = protocol::base64_decode(text)) {
    HOTSWAP_FUZZ_CHECK(decoded->size() <= text.size() / 4 * 3);
    const std::string canonical = protocol::base64_encode(*decoded);
    HOTSWAP_FUZZ_CHECK(same_but_unused_bits(text, canonical));
  }
  const std::string encoded = protocol::base64_encode(std::span<const std::uint8_t>(data, size));
  HOTSWAP_FUZZ_CHECK(encoded.size() == (size + 2) / 3 * 4);
  auto back = protocol::base64_decode(encoded);
  HOTSWAP_FUZZ_CHECK(back && *back == std::vector<std::uint8_t>(data, data + size));
  return 0;
}
