#include "protocol/bounded_json.hpp"

#include <set>
#include <string>
#include <vector>

namespace hotswap::protocol {
namespace {

using nlohmann::json;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::size_t skip_space(std::string_view text, std::size_t i) {
  while (i < text.size() && is_space(text[i]))
    ++i;
  return i;
}

// `i` is at an opening quote: the offset just past the closing one (or the end of the text).
std::size_t skip_string(std::string_view text, std::size_t i) {
  for (++i; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;
    } else if (text[i] == '"') {
      return i + 1;
    }
  }
  return text.size();
}

bool key_matches(std::string_view token, std::string_view key) {
  if (token.find('\\') == std::string_view::npos) {
    return token.size() == key.size() + 2 && token.substr(1, key.size()) == key;
  }
  // An escaped spelling ("\u0069d"): let the parser decode it.
  json decoded = json::parse(token, nullptr, /*allow_exceptions=*/false);
  return decoded.is_string() && decoded.get_ref<const std::string&>() == key;
}

}  // namespace

JsonScan scan_json(std::string_view text, std::size_t max_depth) {
  JsonScan out;
  std::size_t depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      i = skip_string(text, i) - 1;
      if (depth == 0) {
        out.end = i + 1;
        return out;
      }
    } else if (c == '[' || c == '{') {
      if (++depth > out.depth) out.depth = depth;
      if (depth > max_depth) {
        out.too_deep = true;
        out.end = text.size();
        return out;
      }
    } else if (c == ']' || c == '}') {
      if (depth == 0) {  // a close with nothing open: not JSON, the parser will say so
        out.end = i;
        return out;
      }
      if (--depth == 0) {
        out.end = i + 1;
        return out;
      }
    } else if (depth == 0 && !is_space(c)) {
      // A top-level number or literal runs to the next delimiter.
      std::size_t j = i;
      while (j < text.size() && !is_space(text[j]) && text[j] != ',' && text[j] != ']' &&
             text[j] != '}' && text[j] != '[' && text[j] != '{' && text[j] != '"' &&
             text[j] != ':') {
        ++j;
      }
      out.end = j;
      return out;
    }
  }
  out.end = text.size();
  return out;
}

std::optional<std::string_view> top_level_member_text(std::string_view text, std::string_view key) {
  std::size_t i = skip_space(text, 0);
  if (i >= text.size() || text[i] != '{') return std::nullopt;
  std::optional<std::string_view> found;
  ++i;
  while (true) {
    i = skip_space(text, i);
    if (i >= text.size() || text[i] != '"') return found;
    const std::size_t key_begin = i;
    i = skip_string(text, i);
    const std::string_view key_token = text.substr(key_begin, i - key_begin);
    i = skip_space(text, i);
    if (i >= text.size() || text[i] != ':') return found;
    i = skip_space(text, i + 1);
    const std::size_t value_begin = i;
    i += scan_json(text.substr(i), std::numeric_limits<std::size_t>::max()).end;
    if (i == value_begin) return found;
    if (key_matches(key_token, key)) found = text.substr(value_begin, i - value_begin);
    i = skip_space(text, i);
    if (i >= text.size() || text[i] != ',') return found;
    ++i;
  }
}

BoundedJson parse_bounded_json(std::string_view text, const JsonBounds& bounds) {
  BoundedJson out;
  auto refuse = [&](JsonRefusal refusal, std::string reason) {
    out.value = json(json::value_t::discarded);
    out.refusal = refusal;
    out.reason = std::move(reason);
    return out;
  };
  if (text.size() > bounds.max_bytes) {
    return refuse(JsonRefusal::kTooLarge, "is " + std::to_string(text.size()) +
                                              " bytes, over the limit of " +
                                              std::to_string(bounds.max_bytes));
  }
  // Python's json refuses both; nlohmann would skip a byte-order mark (where the depth scan
  // does not) and stop at a NUL (ignoring whatever follows).
  if (text.starts_with("\xEF\xBB\xBF")) {
    return refuse(JsonRefusal::kInvalid, "is not valid JSON (it starts with a byte-order mark)");
  }
  if (text.find('\0') != std::string_view::npos) {
    return refuse(JsonRefusal::kInvalid, "is not valid JSON (it contains a NUL byte)");
  }
  if (scan_json(text, bounds.max_depth).too_deep) {
    return refuse(JsonRefusal::kTooDeep, "nests arrays and objects deeper than " +
                                             std::to_string(bounds.max_depth) + " levels");
  }
  std::string duplicate;
  if (bounds.refuse_duplicate_keys) {
    // One set of keys per object being built; the parser reports each key before its value.
    std::vector<std::set<std::string>> keys;
    json::parser_callback_t callback = [&](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) {
        keys.emplace_back();
      } else if (event == json::parse_event_t::object_end && !keys.empty()) {
        keys.pop_back();
      } else if (event == json::parse_event_t::key && !keys.empty() && parsed.is_string()) {
        if (!keys.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
      }
      return true;
    };
    out.value = json::parse(text, callback, /*allow_exceptions=*/false);
  } else {
    out.value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  }
  if (out.value.is_discarded()) return refuse(JsonRefusal::kInvalid, "is not valid JSON");
  if (!duplicate.empty())
    return refuse(JsonRefusal::kDuplicateKey, "repeats the key '" + duplicate + "'");
  return out;
}

}  // namespace hotswap::protocol
