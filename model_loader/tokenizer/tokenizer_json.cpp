#include "model_loader/tokenizer/tokenizer_json.hpp"

#include <nlohmann/json.hpp>

#include "model_loader/tokenizer/unicode_regex.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader {

using json = nlohmann::json;

std::string required_string(const json& spec, const char* field, const char* component) {
  if (!spec.is_object() || !spec.contains(field) || !spec[field].is_string()) {
    throw protocol::ValueError(std::string("the tokenizer's ") + component + " needs a string `" +
                               field + "`");
  }
  return spec[field].get<std::string>();
}

const json& required_array(const json& spec, const char* field, const char* component) {
  if (!spec.is_object() || !spec.contains(field) || !spec[field].is_array()) {
    throw protocol::ValueError(std::string("the tokenizer's ") + component + " needs an array `" +
                               field + "`");
  }
  return spec[field];
}

bool optional_bool(const json& spec, const char* field, bool fallback, const char* component) {
  if (!spec.is_object() || !spec.contains(field) || spec[field].is_null()) return fallback;
  if (!spec[field].is_boolean()) {
    throw protocol::ValueError(std::string("the tokenizer's ") + component + " field `" + field +
                               "` must be true or false");
  }
  return spec[field].get<bool>();
}

TextPattern TextPattern::from_json(const json& spec, const char* component) {
  if (!spec.is_object() || !spec.contains("pattern") || !spec["pattern"].is_object()) {
    throw protocol::ValueError(std::string("the tokenizer's ") + component +
                               " needs a `pattern` object");
  }
  const json& p = spec["pattern"];
  TextPattern pattern;
  if (p.contains("String") && p["String"].is_string()) {
    pattern.literal_ = p["String"].get<std::string>();
    if (pattern.literal_.empty()) {
      throw protocol::ValueError(std::string("the tokenizer's ") + component +
                                 " has an empty String pattern");
    }
  } else if (p.contains("Regex") && p["Regex"].is_string()) {
    pattern.regex_ = std::make_shared<UnicodeRegex>(p["Regex"].get<std::string>());
  } else {
    throw protocol::ValueError(std::string("the tokenizer's ") + component +
                               " pattern must be {\"String\": ...} or {\"Regex\": ...}");
  }
  return pattern;
}

std::vector<std::pair<std::size_t, std::size_t>> TextPattern::find_all(
    std::string_view text) const {
  if (regex_) return regex_->find_all(text);
  std::vector<std::pair<std::size_t, std::size_t>> found;
  for (std::size_t at = text.find(literal_); at != std::string_view::npos;
       at = text.find(literal_, at + literal_.size()))
    found.emplace_back(at, at + literal_.size());
  return found;
}

std::string TextPattern::replace_all(std::string_view text, const std::string& content) const {
  std::string out;
  out.reserve(text.size());
  std::size_t from = 0;
  for (const auto& [begin, end] : find_all(text)) {
    out.append(text.substr(from, begin - from));
    out += content;
    from = end;
  }
  out.append(text.substr(from));
  return out;
}

}  // namespace hotswap::model_loader
