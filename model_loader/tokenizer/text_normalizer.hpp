// TextNormalizer: the `normalizer` of a tokenizer.json, applied to each stretch of text between
// added tokens before it is split: Unicode normalization (NFC, NFD, NFKC, NFKD, through ICU),
// Prepend, Replace (a string or a regex), Lowercase, and a Sequence of them. Any other type is
// refused by name when the tokenizer is loaded.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <vector>

namespace hotswap::model_loader {

class TextNormalizer {
 public:
  // `spec` is the tokenizer.json's "normalizer" value (null: the identity).
  static TextNormalizer from_json(const nlohmann::json& spec);

  std::string normalize(std::string text) const;

  struct Step;

 private:
  std::vector<std::shared_ptr<const Step>> steps_;
};

}  // namespace hotswap::model_loader
