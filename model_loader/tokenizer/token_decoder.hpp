// TokenDecoder: the `decoder` of a tokenizer.json, which turns a list of token strings back
// into text: ByteLevel (byte-level characters to bytes, invalid UTF-8 as U+FFFD), Metaspace,
// Replace, ByteFallback (<0xNN> tokens to bytes), Fuse, Strip, and a Sequence of them, each
// working on the whole list as tokenizers' decode_chain does. Any other type is refused by
// name when the tokenizer is loaded. Without a decoder, tokens are joined with spaces.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <vector>

namespace hotswap::model_loader {

class TokenDecoder {
 public:
  static TokenDecoder from_json(const nlohmann::json& spec);

  std::string decode(std::vector<std::string> tokens) const;

  struct Step;

 private:
  std::vector<std::shared_ptr<const Step>> steps_;
  bool present_ = false;
};

}  // namespace hotswap::model_loader
