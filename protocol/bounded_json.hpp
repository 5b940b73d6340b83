// Parsing JSON that comes from outside the process (control frames, HTTP bodies, checkpoint
// headers, config files) with bounds checked before anything is built: a size cap, and a
// nesting-depth cap found by a flat scan of the text. nlohmann's parser itself does not recurse,
// but copying, comparing and printing a document do; 100,000 nested brackets in 200 KB would
// overflow the stack the first time the document is described in an error message.
#pragma once

#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace hotswap::protocol {

// Deeper than any request, header or config hotswap reads (they nest 5 levels at most), and
// shallow enough that recursive printing and copying stay within a few hundred KB of stack.
inline constexpr std::size_t kMaxJsonDepth = 128;

struct JsonScan {
  std::size_t depth = 0;  // deepest nesting of arrays and objects seen
  bool too_deep = false;  // the scan stopped at the first level past the limit
  std::size_t end = 0;    // offset just past the top-level value (text.size() if it never closed)
};

// Walks `text` once, tracking strings and brackets, without building anything. Text that is
// not JSON is scanned as far as it goes; the parser that runs next says what is wrong with it.
JsonScan scan_json(std::string_view text, std::size_t max_depth = kMaxJsonDepth);

// The raw text of member `key` of the top-level object in `text` (the last one, as the parser
// keeps the last of duplicate keys); nullopt if `text` is not an object or has no such member.
// For a JSON-RPC id: a number is echoed as it was written, not as a double.
std::optional<std::string_view> top_level_member_text(std::string_view text, std::string_view key);

enum class JsonRefusal { kNone, kTooLarge, kTooDeep, kInvalid, kDuplicateKey };

struct JsonBounds {
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();
  std::size_t max_depth = kMaxJsonDepth;
  // The parser silently keeps the last of repeated keys; formats that forbid them refuse.
  bool refuse_duplicate_keys = false;
};

struct BoundedJson {
  nlohmann::json value;  // discarded when refused
  JsonRefusal refusal = JsonRefusal::kNone;
  // Why, as the end of a sentence about the text: "is not valid JSON", "nests arrays and
  // objects deeper than 128 levels", "is 300 bytes, over the limit of 200", "repeats the key 'a'".
  std::string reason;
  bool ok() const { return refusal == JsonRefusal::kNone; }
};

// Parses `text` within `bounds`; the size and the depth are checked before the parser runs.
BoundedJson parse_bounded_json(std::string_view text, const JsonBounds& bounds = {});

}  // namespace hotswap::protocol
