#include "model_loader/tokenizer/text_normalizer.hpp"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <nlohmann/json.hpp>

#include "model_loader/tokenizer/tokenizer_json.hpp"
#include "model_loader/tokenizer/unicode_regex.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader {

struct TextNormalizer::Step {
  virtual ~Step() = default;
  virtual std::string apply(std::string text) const = 0;
};

namespace {

using json = nlohmann::json;

class UnicodeForm final : public TextNormalizer::Step {
 public:
  explicit UnicodeForm(const std::string& form) : form_(form) {
    UErrorCode status = U_ZERO_ERROR;
    if (form == "NFC") normalizer_ = icu::Normalizer2::getNFCInstance(status);
    if (form == "NFD") normalizer_ = icu::Normalizer2::getNFDInstance(status);
    if (form == "NFKC") normalizer_ = icu::Normalizer2::getNFKCInstance(status);
    if (form == "NFKD") normalizer_ = icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status) || normalizer_ == nullptr) {
      throw protocol::RuntimeError(std::string("ICU has no ") + form +
                                   " normalizer: " + u_errorName(status));
    }
  }
  std::string apply(std::string text) const override {
    UErrorCode status = U_ZERO_ERROR;
    icu::UnicodeString normalized =
        normalizer_->normalize(icu::UnicodeString::fromUTF8(text), status);
    if (U_FAILURE(status)) {
      throw protocol::ValueError("cannot " + form_ + "-normalize the text: " + u_errorName(status));
    }
    std::string out;
    normalized.toUTF8String(out);
    return out;
  }

 private:
  std::string form_;
  const icu::Normalizer2* normalizer_ = nullptr;
};

class Prepend final : public TextNormalizer::Step {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string apply(std::string text) const override {
    return text.empty() ? text : prefix_ + text;  // as tokenizers: nothing for empty text
  }

 private:
  std::string prefix_;
};

class Replace final : public TextNormalizer::Step {
 public:
  Replace(TextPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string apply(std::string text) const override {
    return pattern_.replace_all(text, content_);
  }

 private:
  TextPattern pattern_;
  std::string content_;
};

class Lowercase final : public TextNormalizer::Step {
 public:
  std::string apply(std::string text) const override {
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
    u.toLower(icu::Locale::getRoot());
    std::string out;
    u.toUTF8String(out);
    return out;
  }
};

void add_steps(const json& spec, std::vector<std::shared_ptr<const TextNormalizer::Step>>& out) {
  if (spec.is_null()) return;
  const std::string type = required_string(spec, "type", "normalizer");
  if (type == "Sequence") {
    for (const auto& inner : required_array(spec, "normalizers", "Sequence normalizer"))
      add_steps(inner, out);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    out.push_back(std::make_shared<UnicodeForm>(type));
  } else if (type == "Prepend") {
    out.push_back(
        std::make_shared<Prepend>(required_string(spec, "prepend", "Prepend normalizer")));
  } else if (type == "Replace") {
    out.push_back(
        std::make_shared<Replace>(TextPattern::from_json(spec, "Replace normalizer"),
                                  required_string(spec, "content", "Replace normalizer")));
  } else if (type == "Lowercase") {
    out.push_back(std::make_shared<Lowercase>());
  } else {
    throw protocol::ValueError("the tokenizer's normalizer '" + type +
                               "' is not supported (supported: NFC, NFD, NFKC, NFKD, Prepend, "
                               "Replace, Lowercase, Sequence)");
  }
}

}  // namespace

TextNormalizer TextNormalizer::from_json(const json& spec) {
  TextNormalizer n;
  add_steps(spec, n.steps_);
  return n;
}

std::string TextNormalizer::normalize(std::string text) const {
  for (const auto& step : steps_)
    text = step->apply(std::move(text));
  return text;
}

}  // namespace hotswap::model_loader
