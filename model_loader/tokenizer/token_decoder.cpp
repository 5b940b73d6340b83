#include "model_loader/tokenizer/token_decoder.hpp"

#include <nlohmann/json.hpp>

#include "model_loader/tokenizer/byte_level.hpp"
#include "model_loader/tokenizer/tokenizer_json.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader {

struct TokenDecoder::Step {
  virtual ~Step() = default;
  virtual std::vector<std::string> apply(std::vector<std::string> tokens) const = 0;
};

namespace {

using json = nlohmann::json;
using Tokens = std::vector<std::string>;

class ByteLevel final : public TokenDecoder::Step {
 public:
  Tokens apply(Tokens tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      for (std::size_t at = 0; at < t.size();) {
        const std::size_t n = utf8_length(t, at);
        if (auto b = byte_level_byte(utf8_decode(t, at))) {
          bytes += static_cast<char>(*b);
        } else {
          bytes.append(t, at, n);  // not a byte-level character: kept as it is
        }
        at += n;
      }
    }
    return {utf8_lossy(bytes)};
  }
};

class Replace final : public TokenDecoder::Step {
 public:
  Replace(TextPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Tokens apply(Tokens tokens) const override {
    for (auto& t : tokens)
      t = pattern_.replace_all(t, content_);
    return tokens;
  }

 private:
  TextPattern pattern_;
  std::string content_;
};

// "<0xNN>" → the byte, or -1.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class ByteFallback final : public TokenDecoder::Step {
 public:
  Tokens apply(Tokens tokens) const override {
    Tokens out;
    std::string bytes;
    std::size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      // Valid UTF-8 becomes its text; otherwise one U+FFFD per byte, as tokenizers does.
      if (utf8_lossy(bytes) == bytes) {
        out.push_back(bytes);
      } else {
        for (std::size_t i = 0; i < count; ++i)
          out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      count = 0;
    };
    for (auto& t : tokens) {
      const int b = byte_token(t);
      if (b >= 0) {
        bytes += static_cast<char>(b);
        ++count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }
};

class Fuse final : public TokenDecoder::Step {
 public:
  Tokens apply(Tokens tokens) const override {
    std::string all;
    for (const auto& t : tokens)
      all += t;
    return {all};
  }
};

class Strip final : public TokenDecoder::Step {
 public:
  Strip(std::string content, std::size_t start, std::size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  Tokens apply(Tokens tokens) const override {
    for (auto& t : tokens) {
      std::size_t begin = 0, end = t.size();
      for (std::size_t i = 0; i < start_ && t.compare(begin, content_.size(), content_) == 0 &&
                              begin + content_.size() <= end;
           ++i)
        begin += content_.size();
      for (std::size_t i = 0; i < stop_ && end >= begin + content_.size() &&
                              t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i)
        end -= content_.size();
      t = t.substr(begin, end - begin);
    }
    return tokens;
  }

 private:
  std::string content_;
  std::size_t start_, stop_;
};

class Metaspace final : public TokenDecoder::Step {
 public:
  Metaspace(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  Tokens apply(Tokens tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (std::size_t at = 0; at < t.size();) {
        if (t.compare(at, replacement_.size(), replacement_) == 0) {
          out += ' ';
          at += replacement_.size();
        } else {
          out += t[at++];
        }
      }
      if (i == 0 && strip_first_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

std::size_t count_field(const json& spec, const char* field) {
  if (!spec.contains(field) || !spec[field].is_number_unsigned()) {
    throw protocol::ValueError(std::string("the tokenizer's Strip decoder needs a count `") +
                               field + "`");
  }
  return spec[field].get<std::size_t>();
}

void add_steps(const json& spec, std::vector<std::shared_ptr<const TokenDecoder::Step>>& out) {
  const std::string type = required_string(spec, "type", "decoder");
  if (type == "Sequence") {
    for (const auto& inner : required_array(spec, "decoders", "Sequence decoder"))
      add_steps(inner, out);
  } else if (type == "ByteLevel") {
    out.push_back(std::make_shared<ByteLevel>());
  } else if (type == "Replace") {
    out.push_back(std::make_shared<Replace>(TextPattern::from_json(spec, "Replace decoder"),
                                            required_string(spec, "content", "Replace decoder")));
  } else if (type == "ByteFallback") {
    out.push_back(std::make_shared<ByteFallback>());
  } else if (type == "Fuse") {
    out.push_back(std::make_shared<Fuse>());
  } else if (type == "Strip") {
    out.push_back(std::make_shared<Strip>(required_string(spec, "content", "Strip decoder"),
                                          count_field(spec, "start"), count_field(spec, "stop")));
  } else if (type == "Metaspace") {
    bool strip = true;
    if (spec.contains("prepend_scheme") && spec["prepend_scheme"].is_string()) {
      strip = spec["prepend_scheme"].get<std::string>() != "never";
    } else {
      strip = optional_bool(spec, "add_prefix_space", true, "Metaspace decoder");
    }
    out.push_back(std::make_shared<Metaspace>(
        required_string(spec, "replacement", "Metaspace decoder"), strip));
  } else {
    throw protocol::ValueError("the tokenizer's decoder '" + type +
                               "' is not supported (supported: ByteLevel, Metaspace, Replace, "
                               "ByteFallback, Fuse, Strip, Sequence)");
  }
}

}  // namespace

TokenDecoder TokenDecoder::from_json(const json& spec) {
  TokenDecoder d;
  if (spec.is_null()) return d;
  d.present_ = true;
  add_steps(spec, d.steps_);
  return d;
}

std::string TokenDecoder::decode(std::vector<std::string> tokens) const {
  if (!present_) {
    std::string joined;
    for (std::size_t i = 0; i < tokens.size(); ++i)
      joined += (i > 0 ? " " : "") + tokens[i];
    return joined;
  }
  for (const auto& step : steps_)
    tokens = step->apply(std::move(tokens));
  std::string text;
  for (const auto& t : tokens)
    text += t;
  return text;
}

}  // namespace hotswap::model_loader
