#include "model_loader/tokenizer/incremental_detokenizer.hpp"

#include <algorithm>

namespace hotswap::model_loader {
namespace {

// vLLM starts its window this many ids into the prompt.
constexpr std::size_t kPromptContext = 5;
constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               const std::vector<std::int64_t>& prompt,
                                               bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {
  const std::size_t context = std::min(prompt.size(), kPromptContext);
  std::vector<std::int64_t> tail(prompt.end() - static_cast<std::ptrdiff_t>(context), prompt.end());
  auto decodes = [&](std::size_t begin, std::size_t end) {
    return tokenizer_.decode(
        std::vector<std::int64_t>(tail.begin() + static_cast<std::ptrdiff_t>(begin),
                                  tail.begin() + static_cast<std::ptrdiff_t>(end)),
        skip_special_tokens_);
  };
  // The window starts on a character boundary, and the text handed out so far ends on one: the
  // widest [begin, end) of the context whose decoding neither starts nor ends inside a
  // character. A window that starts inside one decodes it as U+FFFD, and a byte-fallback decoder
  // (SentencePiece) then turns the whole run of byte tokens around it into U+FFFDs for as long
  // as the window starts there: nothing would ever be handed out. A prompt that ends inside a
  // character keeps that character's start in the window after `end`, so that the first output
  // ids complete it.
  auto clean = [&](std::size_t begin, std::size_t end) {
    const std::string text = decodes(begin, end);
    return !text.starts_with(kReplacementCharacter) && !text.ends_with(kReplacementCharacter);
  };
  for (std::size_t end = tail.size(); end > 0; --end) {
    for (std::size_t begin = 0; begin < end; ++begin) {
      if (clean(begin, end)) {
        ids_.assign(tail.begin() + static_cast<std::ptrdiff_t>(begin), tail.end());
        read_offset_ = end - begin;
        return;
      }
    }
  }
  // No character boundary in the context (a run of continuation bytes): the output alone.
}

std::string IncrementalDetokenizer::push(std::int64_t id) {
  ids_.push_back(id);
  auto window = [&](std::size_t end) {
    return tokenizer_.decode(
        std::vector<std::int64_t>(ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_),
                                  ids_.begin() + static_cast<std::ptrdiff_t>(end)),
        skip_special_tokens_);
  };
  const std::string before = window(read_offset_);
  const std::string now = window(ids_.size());
  // Text that ends in a replacement character waits for the bytes that complete it. Past that,
  // as in vLLM, the new text is what the window's decoding has beyond the old one. The old one
  // is normally a prefix of the new; where it is not (a byte-fallback run the output left
  // invalid after a prompt that ended inside a character reads as U+FFFDs), the piece starts
  // where the two part, moved back to a character boundary so that no UTF-8 sequence is cut.
  // A window whose decoding does not grow (a skipped special token) hands out nothing.
  if (now.ends_with(kReplacementCharacter)) return {};
  std::size_t common = 0;
  while (common < before.size() && common < now.size() && before[common] == now[common])
    ++common;
  while (common > 0 && common < now.size() &&
         (static_cast<unsigned char>(now[common]) & 0xC0) == 0x80) {
    --common;
  }
  if (common >= now.size()) return {};
  std::string piece = now.substr(common);
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  text_ += piece;
  return piece;
}

}  // namespace hotswap::model_loader
