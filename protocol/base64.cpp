#include "protocol/base64.hpp"

#include <openssl/evp.h>

namespace hotswap::protocol {
namespace {

bool is_alphabet(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
         c == '/';
}

}  // namespace

std::string base64_encode(std::span<const std::uint8_t> bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes.data(),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::optional<std::vector<std::uint8_t>> base64_decode(std::string_view text) {
  // OpenSSL's decoder skips whitespace and tolerates misplaced padding, so the strict shape is
  // checked here first and OpenSSL only does the arithmetic.
  if (text.size() % 4 != 0) return std::nullopt;
  std::size_t padding = 0;
  if (!text.empty() && text.back() == '=') ++padding;
  if (text.size() >= 2 && text[text.size() - 2] == '=') ++padding;
  for (std::size_t i = 0; i + padding < text.size(); ++i) {
    if (!is_alphabet(text[i])) return std::nullopt;
  }
  std::vector<std::uint8_t> out(3 * (text.size() / 4));
  if (text.empty()) return out;
  int n = EVP_DecodeBlock(out.data(), reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  out.resize(static_cast<std::size_t>(n) - padding);
  return out;
}

}  // namespace hotswap::protocol
