#include "model_loader/tokenizer/pre_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include "model_loader/tokenizer/byte_level.hpp"
#include "model_loader/tokenizer/tokenizer_json.hpp"
#include "model_loader/tokenizer/unicode_regex.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader {

struct PreTokenizer::Step {
  virtual ~Step() = default;
  // Splits one piece further, appending the results to `out`.
  virtual void split(const std::string& piece, bool first, std::vector<std::string>& out) const = 0;
};

namespace {

using json = nlohmann::json;
using Spans = std::vector<std::pair<std::size_t, std::size_t>>;

// GPT-2's pattern, which ByteLevel uses when use_regex is on.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior behavior_of(const std::string& name) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  throw protocol::ValueError("the tokenizer's Split behavior '" + name +
                             "' is not one of Removed, Isolated, MergedWithPrevious, "
                             "MergedWithNext, Contiguous");
}

// Cuts `text` at `matches` as tokenizers' split behaviors do; with `invert`, the stretches
// between matches play the matches' part.
void cut(const std::string& text, Spans matches, Behavior behavior, bool invert,
         std::vector<std::string>& out) {
  // Every stretch of the text, tagged with whether it is a "match".
  std::vector<std::pair<std::pair<std::size_t, std::size_t>, bool>> stretches;
  std::size_t at = 0;
  for (const auto& m : matches) {
    if (m.first > at) stretches.push_back({{at, m.first}, invert});
    stretches.push_back({m, !invert});
    at = m.second;
  }
  if (at < text.size()) stretches.push_back({{at, text.size()}, invert});

  std::string pending;  // MergedWithNext: a match waiting for what follows it
  bool last_was_match = false;
  for (const auto& [span, is_match] : stretches) {
    std::string s = text.substr(span.first, span.second - span.first);
    switch (behavior) {
      case Behavior::kRemoved:
        if (!is_match) out.push_back(std::move(s));
        break;
      case Behavior::kIsolated:
        out.push_back(std::move(s));
        break;
      case Behavior::kMergedWithPrevious:
        if (is_match && !out.empty() && !last_was_match) {
          out.back() += s;
        } else {
          out.push_back(std::move(s));
        }
        break;
      case Behavior::kMergedWithNext:
        if (is_match) {
          if (!pending.empty()) out.push_back(std::move(pending));
          pending = std::move(s);
        } else {
          out.push_back(pending + s);
          pending.clear();
        }
        break;
      case Behavior::kContiguous:
        if (is_match && last_was_match && !out.empty()) {
          out.back() += s;
        } else {
          out.push_back(std::move(s));
        }
        break;
    }
    last_was_match = is_match;
  }
  if (!pending.empty()) out.push_back(std::move(pending));
}

class ByteLevel final : public PreTokenizer::Step {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_shared<UnicodeRegex>(kGpt2Pattern) : nullptr) {}
  void split(const std::string& piece, bool, std::vector<std::string>& out) const override {
    std::string text = piece;
    if (add_prefix_space_ && (text.empty() || text[0] != ' ')) text.insert(text.begin(), ' ');
    std::vector<std::string> parts;
    if (regex_) {
      cut(text, regex_->find_all(text), Behavior::kIsolated, false, parts);
    } else {
      parts.push_back(std::move(text));
    }
    for (auto& p : parts)
      out.push_back(to_byte_level(p));
  }

 private:
  bool add_prefix_space_;
  std::shared_ptr<const UnicodeRegex> regex_;
};

class Split final : public PreTokenizer::Step {
 public:
  Split(TextPattern pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void split(const std::string& piece, bool, std::vector<std::string>& out) const override {
    cut(piece, pattern_.find_all(piece), behavior_, invert_, out);
  }

 private:
  TextPattern pattern_;
  Behavior behavior_;
  bool invert_;
};

class Metaspace final : public PreTokenizer::Step {
 public:
  Metaspace(std::string replacement, std::string scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(std::move(scheme)), split_(split) {}
  void split(const std::string& piece, bool first, std::vector<std::string>& out) const override {
    std::string text;
    for (char c : piece) {
      if (c == ' ') {
        text += replacement_;
      } else {
        text += c;
      }
    }
    const bool prepend = scheme_ == "always" || (scheme_ == "first" && first);
    if (prepend && text.compare(0, replacement_.size(), replacement_) != 0)
      text.insert(0, replacement_);
    if (!split_) {
      out.push_back(std::move(text));
      return;
    }
    Spans marks;
    for (std::size_t at = text.find(replacement_); at != std::string::npos;
         at = text.find(replacement_, at + replacement_.size()))
      marks.emplace_back(at, at + replacement_.size());
    cut(text, std::move(marks), Behavior::kMergedWithNext, false, out);
  }

 private:
  std::string replacement_;
  std::string scheme_;
  bool split_;
};

class Digits final : public PreTokenizer::Step {
 public:
  explicit Digits(bool individual)
      : individual_(individual), regex_(std::make_shared<UnicodeRegex>(R"(\p{N})")) {}
  void split(const std::string& piece, bool, std::vector<std::string>& out) const override {
    cut(piece, regex_->find_all(piece), individual_ ? Behavior::kIsolated : Behavior::kContiguous,
        false, out);
  }

 private:
  bool individual_;
  std::shared_ptr<const UnicodeRegex> regex_;
};

void add_steps(const json& spec, std::vector<std::shared_ptr<const PreTokenizer::Step>>& out) {
  if (spec.is_null()) return;
  const std::string type = required_string(spec, "type", "pre_tokenizer");
  if (type == "Sequence") {
    for (const auto& inner : required_array(spec, "pretokenizers", "Sequence pre_tokenizer"))
      add_steps(inner, out);
  } else if (type == "ByteLevel") {
    out.push_back(std::make_shared<ByteLevel>(
        optional_bool(spec, "add_prefix_space", true, "ByteLevel pre_tokenizer"),
        optional_bool(spec, "use_regex", true, "ByteLevel pre_tokenizer")));
  } else if (type == "Split") {
    out.push_back(std::make_shared<Split>(
        TextPattern::from_json(spec, "Split pre_tokenizer"),
        behavior_of(required_string(spec, "behavior", "Split pre_tokenizer")),
        optional_bool(spec, "invert", false, "Split pre_tokenizer")));
  } else if (type == "Metaspace") {
    std::string scheme = "always";
    if (spec.contains("prepend_scheme") && spec["prepend_scheme"].is_string()) {
      scheme = spec["prepend_scheme"].get<std::string>();
    } else if (!optional_bool(spec, "add_prefix_space", true, "Metaspace pre_tokenizer")) {
      scheme = "never";
    }
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      throw protocol::ValueError("the tokenizer's Metaspace prepend_scheme '" + scheme +
                                 "' is not one of always, first, never");
    }
    out.push_back(std::make_shared<Metaspace>(
        required_string(spec, "replacement", "Metaspace pre_tokenizer"), scheme,
        optional_bool(spec, "split", true, "Metaspace pre_tokenizer")));
  } else if (type == "Digits") {
    out.push_back(std::make_shared<Digits>(
        optional_bool(spec, "individual_digits", false, "Digits pre_tokenizer")));
  } else {
    throw protocol::ValueError("the tokenizer's pre_tokenizer '" + type +
                               "' is not supported (supported: ByteLevel, Split, Metaspace, "
                               "Digits, Sequence)");
  }
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const json& spec) {
  PreTokenizer p;
  add_steps(spec, p.steps_);
  return p;
}

std::vector<std::string> PreTokenizer::split(const std::string& text, bool first) const {
  std::vector<std::string> pieces{text};
  for (const auto& step : steps_) {
    std::vector<std::string> next;
    next.reserve(pieces.size());
    for (const auto& piece : pieces)
      step->split(piece, first, next);
    pieces = std::move(next);
  }
  // Empty pieces carry no tokens.
  std::erase_if(pieces, [](const std::string& p) { return p.empty(); });
  return pieces;
}

}  // namespace hotswap::model_loader
