// Text to tokenize, as a completion's prompt brings it, through tokenizers of two kinds
// (tests/golden/tokenizer/): byte-level BPE (GPT-2's) must give any valid UTF-8 back exactly
// from its ids; SentencePiece-style BPE with byte fallback must take any of it. Invalid UTF-8
// is a ValueError, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_support.hpp"
#include "model_loader/tokenizer/byte_level.hpp"
#include "model_loader/tokenizer/tokenizer.hpp"
#include "protocol/errors.hpp"

namespace {
using hotswap::model_loader::Tokenizer;
const Tokenizer& byte_level() {
  static const Tokenizer t =
      Tokenizer::from_file(std::string(HOTSWAP_GOLDEN_DIR) + "/tokenizer/gpt2/tokenizer.json");
  return t;
}
const Tokenizer& sentencepiece() {
  static const Tokenizer t = Tokenizer::from_file(std::string(HOTSWAP_GOLDEN_DIR) +
                                                  "/tokenizer/sentencepiece/tokenizer.json");
  return t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(hotswap::fuzz::as_text(data, size));
  if (!hotswap::model_loader::utf8_valid(text)) {
    try {
      byte_level().encode(text);
      HOTSWAP_FUZZ_CHECK(false && "invalid UTF-8 was encoded");
    } catch (const hotswap::protocol::ValueError&) {
    }
    return 0;
  }
  const auto ids = hotswap::fuzz::must_succeed("byte-level encode",
                                               [&] { return byte_level().encode(text, false); });
  HOTSWAP_FUZZ_CHECK(byte_level().decode(ids) == text);
  const auto pieces = hotswap::fuzz::must_succeed(
      "sentencepiece encode", [&] { return sentencepiece().encode(text, true); });
  for (auto id : pieces)
    HOTSWAP_FUZZ_CHECK(id >= 0 && id < sentencepiece().vocab_size());
  sentencepiece().decode(pieces, true);
  return 0;
}
