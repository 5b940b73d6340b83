// What the parts of a tokenizer.json share: typed field access whose errors name the component
// and the field, and TextPattern, the {"String": ...} or {"Regex": ...} of Replace and Split.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hotswap::model_loader {

class UnicodeRegex;

// `spec[field]` as a string / array / bool; ValueError naming `component` and `field`.
std::string required_string(const nlohmann::json& spec, const char* field, const char* component);
const nlohmann::json& required_array(const nlohmann::json& spec, const char* field,
                                     const char* component);
bool optional_bool(const nlohmann::json& spec, const char* field, bool fallback,
                   const char* component);

class TextPattern {
 public:
  // From `spec["pattern"]`: {"String": s} (literal) or {"Regex": r}.
  static TextPattern from_json(const nlohmann::json& spec, const char* component);

  // Every non-overlapping match, [begin, end) byte offsets, left to right.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;
  std::string replace_all(std::string_view text, const std::string& content) const;

 private:
  std::string literal_;
  std::shared_ptr<const UnicodeRegex> regex_;  // set for a Regex pattern
};

}  // namespace hotswap::model_loader
