// Byte-level BPE's alphabet (GPT-2, Llama-3, Qwen2): each of the 256 bytes is one printable
// Unicode character, so that any byte string is a string of vocabulary symbols. Printable
// Latin-1 bytes stand for themselves; the other 68 (controls, space, soft hyphen...) map to
// U+0100 and up, in byte order. And the UTF-8 helpers the tokenizer's steps share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hotswap::model_loader {

// The UTF-8 text of the character standing for `byte`.
const std::string& byte_level_char(std::uint8_t byte);
// The byte a character (one code point) stands for; nullopt for a character outside the table.
std::optional<std::uint8_t> byte_level_byte(char32_t code_point);
// Every byte of `bytes` as its character.
std::string to_byte_level(std::string_view bytes);

// The length in bytes of the UTF-8 sequence starting at `text[at]` (1 for an invalid lead, so
// that a walk always advances).
std::size_t utf8_length(std::string_view text, std::size_t at);
// The code point at `text[at]` (U+FFFD for an invalid sequence).
char32_t utf8_decode(std::string_view text, std::size_t at);
void utf8_append(std::string& out, char32_t code_point);
// Whether `text` is valid UTF-8 throughout.
bool utf8_valid(std::string_view text);
// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD, as tokenizers' lossy decoding
// (Rust's String::from_utf8_lossy) does.
std::string utf8_lossy(std::string_view bytes);

}  // namespace hotswap::model_loader
