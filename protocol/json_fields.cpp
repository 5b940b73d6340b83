#include "protocol/json_fields.hpp"

#include <algorithm>

#include "protocol/errors.hpp"

namespace hotswap::protocol {
namespace {

using nlohmann::json;

bool is_integer(const json& v) {
  return v.is_number_integer();
}

std::string quote_list(const std::vector<std::string>& names) {
  // Python's wording: 'a', 'a' and 'b', 'a', 'b', and 'c'.
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += (i + 1 == names.size()) ? (names.size() > 2 ? ", and " : " and ") : ", ";
    out += "'" + names[i] + "'";
  }
  return out;
}

}  // namespace

std::string describe_json(const json& value) {
  constexpr std::size_t kMaxShown = 40;
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxShown) {
    // Cut between two UTF-8 characters, never inside one: the message goes into JSON.
    std::size_t cut = kMaxShown;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
      --cut;
    text = text.substr(0, cut) + "...";
  }
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean " + text;
    case json::value_t::string:
      return "string " + text;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer " + text;
    case json::value_t::number_float:
      return "number " + text;
    case json::value_t::array:
      return "array " + text;
    case json::value_t::object:
      return "object " + text;
    default:
      return text;
  }
}

JsonFields::JsonFields(const json& object, std::string type_name,
                       std::initializer_list<std::string_view> fields, bool keyword_only)
    : object_(object), type_name_(std::move(type_name)), keyword_only_(keyword_only) {
  if (!object_.is_object()) {
    throw ValueError(type_name_ + " expects a JSON object, got " + describe_json(object_));
  }
  for (const auto& [key, value] : object_.items()) {
    if (std::find(fields.begin(), fields.end(), key) == fields.end()) {
      throw ValueError(type_name_ + ".__init__() got an unexpected keyword argument '" + key + "'");
    }
  }
}

bool JsonFields::has(std::string_view key) const {
  return object_.contains(std::string(key));
}

const json* JsonFields::find(std::string_view key) const {
  auto it = object_.find(std::string(key));
  if (it == object_.end()) return nullptr;
  return &*it;
}

void JsonFields::type_error(std::string_view key, std::string_view wanted, const json& got) const {
  throw ValueError(type_name_ + ": field `" + std::string(key) + "` must be " +
                   std::string(wanted) + ", got " + describe_json(got));
}

std::string JsonFields::required_string(std::string_view key) {
  auto v = optional_string(key);
  if (!v) {
    const json* raw = find(key);
    if (raw == nullptr) {
      missing_.emplace_back(key);
      return {};
    }
    type_error(key, "a string", *raw);  // present but null
  }
  return *v;
}

std::int64_t JsonFields::required_int(std::string_view key) {
  const json* v = find(key);
  if (v == nullptr) {
    missing_.emplace_back(key);
    return 0;
  }
  if (!is_integer(*v)) type_error(key, "an integer", *v);
  if (v->is_number_unsigned() && v->get<std::uint64_t>() > INT64_MAX) {
    type_error(key, "an integer that fits in 64 bits", *v);
  }
  return v->get<std::int64_t>();
}

std::vector<std::string> JsonFields::required_string_list(std::string_view key) {
  const json* v = find(key);
  if (v == nullptr) {
    missing_.emplace_back(key);
    return {};
  }
  if (!v->is_array()) type_error(key, "a list of strings", *v);
  std::vector<std::string> out;
  out.reserve(v->size());
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& item = (*v)[i];
    if (!item.is_string()) {
      type_error(std::string(key) + "[" + std::to_string(i) + "]", "a string", item);
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::vector<std::vector<std::int64_t>> JsonFields::required_shape_list(std::string_view key) {
  const json* v = find(key);
  if (v == nullptr) {
    missing_.emplace_back(key);
    return {};
  }
  if (!v->is_array()) type_error(key, "a list of shapes (lists of integers)", *v);
  std::vector<std::vector<std::int64_t>> out;
  out.reserve(v->size());
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& shape = (*v)[i];
    std::string where = std::string(key) + "[" + std::to_string(i) + "]";
    if (!shape.is_array()) type_error(where, "a list of integers", shape);
    std::vector<std::int64_t> dims;
    dims.reserve(shape.size());
    for (const json& d : shape) {
      if (!d.is_number_integer() || (d.is_number_integer() && d.get<std::int64_t>() < 0)) {
        type_error(where, "a list of non-negative integers", shape);
      }
      dims.push_back(d.get<std::int64_t>());
    }
    out.push_back(std::move(dims));
  }
  return out;
}

std::vector<std::int64_t> JsonFields::required_int_list(std::string_view key) {
  if (!has(key)) {
    missing_.emplace_back(key);
    return {};
  }
  auto v = optional_int_list(key);
  if (!v) type_error(key, "a list of integers", nullptr);
  return *v;
}

std::optional<std::string> JsonFields::optional_string(std::string_view key) {
  const json* v = find(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_string()) type_error(key, "a string", *v);
  return v->get<std::string>();
}

std::optional<std::int64_t> JsonFields::optional_int(std::string_view key) {
  const json* v = find(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!is_integer(*v)) type_error(key, "an integer", *v);
  if (v->is_number_unsigned() && v->get<std::uint64_t>() > INT64_MAX) {
    type_error(key, "an integer that fits in 64 bits", *v);
  }
  return v->get<std::int64_t>();
}

std::optional<bool> JsonFields::optional_bool(std::string_view key) {
  const json* v = find(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_boolean()) type_error(key, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::vector<std::int64_t>> JsonFields::optional_int_list(std::string_view key) {
  const json* v = find(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_array()) type_error(key, "a list of integers", *v);
  std::vector<std::int64_t> out;
  out.reserve(v->size());
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& item = (*v)[i];
    if (!is_integer(item)) {
      type_error(std::string(key) + "[" + std::to_string(i) + "]", "an integer", item);
    }
    out.push_back(item.get<std::int64_t>());
  }
  return out;
}

std::optional<json> JsonFields::optional_value(std::string_view key) {
  const json* v = find(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  return *v;
}

void JsonFields::finish() const {
  if (!missing_.empty()) {
    std::string kind = keyword_only_ ? "keyword-only" : "positional";
    std::string noun = missing_.size() == 1 ? "argument" : "arguments";
    throw ValueError(type_name_ + ".__init__() missing " + std::to_string(missing_.size()) +
                     " required " + kind + " " + noun + ": " + quote_list(missing_));
  }
}

}  // namespace hotswap::protocol
