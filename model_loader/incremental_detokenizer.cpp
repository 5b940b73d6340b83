#include "model_loader/incremental_detokenizer.hpp"

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
  ids_.assign(prompt.end() - static_cast<std::ptrdiff_t>(context), prompt.end());
  // A prompt that ends inside a character would make every later window decode differently
  // from the context's own text: leave the incomplete tail out of the context.
  while (!ids_.empty() &&
         tokenizer_.decode(ids_, skip_special_tokens_).ends_with(kReplacementCharacter)) {
    ids_.pop_back();
  }
  read_offset_ = ids_.size();
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
  // Text that ends in a replacement character waits for the bytes that complete it; a window
  // whose decoding does not grow (a skipped special token) hands out nothing. Past that, as in
  // vLLM, the new text is whatever the window's decoding has beyond the old one's length.
  if (now.size() <= before.size() || now.ends_with(kReplacementCharacter)) return {};
  std::string piece = now.substr(before.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  text_ += piece;
  return piece;
}

}  // namespace hotswap::model_loader
