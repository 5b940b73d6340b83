// A tokenizer.json, the file a model directory brings. Whatever it holds, loading either
// succeeds or is a ValueError naming the file; a tokenizer it accepts encodes and decodes text
// without crashing, and its ids are inside its vocabulary.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "fuzz/fuzz_support.hpp"
#include "model_loader/tokenizer/tokenizer.hpp"
#include "protocol/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using hotswap::model_loader::Tokenizer;
  std::optional<Tokenizer> tokenizer;
  try {
    tokenizer = Tokenizer::from_json_text(hotswap::fuzz::as_text(data, size), "fuzz.json");
  } catch (const hotswap::protocol::Error& e) {
    hotswap::fuzz::check_error_reply(e);
    return 0;
  }
  for (const char* text : {"ab", "hello world", "\xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80", "  \n\t"}) {
    try {
      const auto ids = tokenizer->encode(text, true);
      for (auto id : ids)
        HOTSWAP_FUZZ_CHECK(id >= 0 && id < tokenizer->vocab_size());
      tokenizer->decode(ids, false);
      tokenizer->decode(ids, true);
    } catch (const hotswap::protocol::Error& e) {
      // A character without a token and no fallback: a ValueError naming it.
      hotswap::fuzz::check_error_reply(e);
    }
  }
  return 0;
}
