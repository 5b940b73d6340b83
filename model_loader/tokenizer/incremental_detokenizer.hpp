// IncrementalDetokenizer: the text of a growing list of generated ids, handed out piece by piece
// as tokens arrive, the way vLLM streams it. Decoding one token alone can be wrong twice over: a
// byte-level token may hold half a UTF-8 character, and SentencePiece-style decoders strip the
// leading space of whatever they decode first. So each new token is decoded together with a few
// before it (starting from the prompt's tail), only the text past that window's own decoding is
// new, and nothing is handed out while the text ends in an incomplete character (U+FFFD).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model_loader/tokenizer/tokenizer.hpp"

namespace hotswap::model_loader {

class IncrementalDetokenizer {
 public:
  // `prompt` gives the context the first output token is decoded after (its last few ids).
  IncrementalDetokenizer(const Tokenizer& tokenizer, const std::vector<std::int64_t>& prompt,
                         bool skip_special_tokens);

  // Adds one generated id; returns the text it completes (possibly empty).
  std::string push(std::int64_t id);
  // The whole text handed out so far.
  const std::string& text() const { return text_; }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<std::int64_t> ids_;  // the prompt's tail, then every output id
  std::size_t prefix_offset_ = 0;  // the window's first id
  std::size_t read_offset_ = 0;    // the first id whose text has not been handed out
  std::string text_;
};

}  // namespace hotswap::model_loader
