// PreTokenizer: the `pre_tokenizer` of a tokenizer.json, which cuts a normalized stretch of
// text into the pieces BPE runs on: ByteLevel (GPT-2's split regex, optional, then every byte
// as its byte-level character), Split (a string or regex, with tokenizers' five behaviors and
// `invert`), Metaspace (SentencePiece's ▁), Digits, and a Sequence of them. Any other type is
// refused by name when the tokenizer is loaded.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <vector>

namespace hotswap::model_loader {

class PreTokenizer {
 public:
  // `spec` is the tokenizer.json's "pre_tokenizer" value (null: the text is one piece).
  static PreTokenizer from_json(const nlohmann::json& spec);

  // The pieces of `text`. `first` says whether the text starts the input (no added token
  // before it), which Metaspace's prepend_scheme "first" reads.
  std::vector<std::string> split(const std::string& text, bool first) const;

  struct Step;

 private:
  std::vector<std::shared_ptr<const Step>> steps_;
};

}  // namespace hotswap::model_loader
