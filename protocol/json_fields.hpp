// JsonFields: reads a JSON object into a typed struct the way vLLM builds its dataclasses with
// `Cls(**payload)`, and stricter. An unexpected key is an error naming it; a missing required
// field is an error naming it; a field of the wrong JSON type names the field and the type it
// wanted. Every message starts with the dataclass name, as Python's TypeError does.
//
// Usage: construct with every field the type accepts (an unexpected key fails right there, as
// Python's `__init__` does before anything else), read the fields, then call finish() to report
// the required fields that were missing.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotswap::protocol {

class JsonFields {
 public:
  // `type_name` is the dataclass name used in messages, e.g. "NCCLWeightTransferInitInfo".
  // `keyword_only` selects Python's wording for missing fields.
  JsonFields(const nlohmann::json& object, std::string type_name,
             std::initializer_list<std::string_view> fields, bool keyword_only = false);

  const std::string& type_name() const { return type_name_; }

  // Required fields: recorded as missing (reported together by finish()) when absent.
  std::string required_string(std::string_view key);
  std::int64_t required_int(std::string_view key);
  std::vector<std::string> required_string_list(std::string_view key);
  std::vector<std::vector<std::int64_t>> required_shape_list(std::string_view key);
  std::vector<std::int64_t> required_int_list(std::string_view key);

  // Optional fields: absent or null gives nullopt.
  std::optional<std::string> optional_string(std::string_view key);
  std::optional<std::int64_t> optional_int(std::string_view key);
  std::optional<bool> optional_bool(std::string_view key);
  std::optional<std::vector<std::int64_t>> optional_int_list(std::string_view key);
  // Any JSON value, unchecked: for fields whose shape the caller validates itself.
  std::optional<nlohmann::json> optional_value(std::string_view key);

  bool has(std::string_view key) const;

  // Throws a ValueError naming every required field that was absent.
  void finish() const;

  // "NCCLWeightTransferInitInfo: field `master_port` must be an integer, got string \"x\"".
  [[noreturn]] void type_error(std::string_view key, std::string_view wanted,
                               const nlohmann::json& got) const;

 private:
  const nlohmann::json* find(std::string_view key) const;

  const nlohmann::json& object_;
  std::string type_name_;
  bool keyword_only_;
  std::vector<std::string> missing_;
};

// "string \"abc\"", "number 1.5", "array", ...: how a JSON value is described in messages.
std::string describe_json(const nlohmann::json& value);

}  // namespace hotswap::protocol
