#include "model_loader/tokenizer/byte_level.hpp"

#include <array>

namespace hotswap::model_loader {
namespace {

struct Tables {
  std::array<std::string, 256> chars;
  std::array<int, 324> bytes{};  // code point (< 0x144) → byte + 1, 0 for none

  Tables() {
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? static_cast<char32_t>(b) : 0x100 + next++;
      utf8_append(chars[b], cp);
      bytes[cp] = b + 1;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_level_char(std::uint8_t byte) {
  return tables().chars[byte];
}

std::optional<std::uint8_t> byte_level_byte(char32_t code_point) {
  if (code_point >= tables().bytes.size() || tables().bytes[code_point] == 0) return std::nullopt;
  return static_cast<std::uint8_t>(tables().bytes[code_point] - 1);
}

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes)
    out += byte_level_char(b);
  return out;
}

namespace {
// Length of a valid sequence at `at`, 0 when it is not valid (overlong, surrogate, too large,
// truncated).
std::size_t valid_length(std::string_view s, std::size_t at) {
  const auto c = static_cast<unsigned char>(s[at]);
  std::size_t n;
  char32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (at + n > s.size()) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    const auto d = static_cast<unsigned char>(s[at + i]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  return n;
}
}  // namespace

std::size_t utf8_length(std::string_view text, std::size_t at) {
  const std::size_t n = valid_length(text, at);
  return n == 0 ? 1 : n;
}

char32_t utf8_decode(std::string_view text, std::size_t at) {
  const std::size_t n = valid_length(text, at);
  if (n == 0) return 0xFFFD;
  const auto c = static_cast<unsigned char>(text[at]);
  if (n == 1) return c;
  char32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (std::size_t i = 1; i < n; ++i)
    cp = (cp << 6) | (static_cast<unsigned char>(text[at + i]) & 0x3F);
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool utf8_valid(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = valid_length(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t n = valid_length(bytes, i);
    if (n == 0) {
      // Rust's from_utf8_lossy replaces each maximal invalid prefix of a would-be sequence
      // with one U+FFFD: a lead byte and the continuation bytes that fit it so far.
      std::size_t bad = 1;
      const auto c = static_cast<unsigned char>(bytes[i]);
      const std::size_t want = c >= 0xF0 && c <= 0xF4   ? 4
                               : c >= 0xE0 && c <= 0xEF ? 3
                               : c >= 0xC2 && c <= 0xDF ? 2
                                                        : 1;
      while (bad < want && i + bad < bytes.size() &&
             (static_cast<unsigned char>(bytes[i + bad]) & 0xC0) == 0x80 &&
             !(bad == 1 && ((c == 0xE0 && static_cast<unsigned char>(bytes[i + 1]) < 0xA0) ||
                            (c == 0xED && static_cast<unsigned char>(bytes[i + 1]) > 0x9F) ||
                            (c == 0xF0 && static_cast<unsigned char>(bytes[i + 1]) < 0x90) ||
                            (c == 0xF4 && static_cast<unsigned char>(bytes[i + 1]) > 0x8F))))
        ++bad;
      out += "\xEF\xBF\xBD";
      i += bad;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace hotswap::model_loader
