#include "model_loader/safetensors_header.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "protocol/bounded_json.hpp"
#include "protocol/errors.hpp"
#include "protocol/param_meta.hpp"

namespace hotswap::model_loader {
namespace {

using protocol::DType;

struct DTypeName {
  DType dtype;
  std::string_view name;
};

constexpr std::array kSafetensorsNames{
    DTypeName{DType::kFloat64, "F64"},
    DTypeName{DType::kFloat32, "F32"},
    DTypeName{DType::kFloat16, "F16"},
    DTypeName{DType::kBFloat16, "BF16"},
    DTypeName{DType::kInt64, "I64"},
    DTypeName{DType::kInt32, "I32"},
    DTypeName{DType::kInt16, "I16"},
    DTypeName{DType::kInt8, "I8"},
    DTypeName{DType::kUInt8, "U8"},
    DTypeName{DType::kBool, "BOOL"},
    DTypeName{DType::kFloat8E4M3FN, "F8_E4M3"},
    DTypeName{DType::kFloat8E5M2, "F8_E5M2"},
};

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& d : kSafetensorsNames) {
    if (d.dtype == dtype) return d.name;
  }
  throw protocol::ValueError("dtype " + std::string(protocol::dtype_name(dtype)) +
                             " has no safetensors name");
}

DType dtype_from_safetensors_name(std::string_view name) {
  for (const auto& d : kSafetensorsNames) {
    if (d.name == name) return d.dtype;
  }
  throw protocol::ValueError("unknown safetensors dtype '" + std::string(name) + "'");
}

SafetensorsHeader SafetensorsHeader::parse(std::span<const std::uint8_t> file,
                                           const std::string& path) {
  SafetensorsHeader out;
  auto fail = [&](const std::string& what) {
    return protocol::ValueError("malformed safetensors file " + path + ": " + what);
  };
  if (file.size() < 8) {
    throw fail("it is " + std::to_string(file.size()) +
               " bytes, too short for the 8-byte header length");
  }
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);  // little-endian on every platform hotswap runs on
  if (header_len > kMaxSafetensorsHeaderBytes) {
    throw fail("header length " + std::to_string(header_len) + " exceeds the " +
               std::to_string(kMaxSafetensorsHeaderBytes) + "-byte cap");
  }
  if (8 + header_len > file.size()) {
    throw fail("header length " + std::to_string(header_len) + " runs past the end of the " +
               std::to_string(file.size()) + "-byte file");
  }
  out.data_start = 8 + header_len;
  const std::uint64_t data_size = file.size() - out.data_start;

  auto text = std::string_view(reinterpret_cast<const char*>(file.data() + 8), header_len);
  // The reference library's rules: the JSON starts at the first byte, and only spaces (its
  // padding to 8 bytes) may follow it.
  if (text.empty() || text.front() != '{') throw fail("the header does not start with '{'");
  const std::size_t json_end = protocol::scan_json(text).end;
  for (std::size_t i = json_end; i < text.size(); ++i) {
    if (text[i] != ' ') {
      throw fail("byte " + std::to_string(8 + i) +
                 " after the header's JSON is not a space (only space padding may follow it)");
    }
  }
  auto parsed = protocol::parse_bounded_json(text.substr(0, json_end),
                                             protocol::JsonBounds{.refuse_duplicate_keys = true});
  if (!parsed.ok()) throw fail("the header " + parsed.reason);
  const nlohmann::json& header = parsed.value;
  if (!header.is_object()) throw fail("the header is not a JSON object");

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw fail("__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) throw fail("__metadata__['" + key + "'] is not a string");
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    // A named copy: capturing a structured binding needs clang 16, and the fuzzers use 14.
    const std::string& tensor = name;
    auto bad = [&](const std::string& what) { return fail("tensor '" + tensor + "': " + what); };
    if (!entry.is_object()) throw bad("its entry is not an object");
    for (const auto& [key, value] : entry.items()) {
      if (key != "dtype" && key != "shape" && key != "data_offsets") {
        throw bad("unexpected key '" + key + "'");
      }
    }
    auto dtype = entry.find("dtype");
    auto shape = entry.find("shape");
    auto offsets = entry.find("data_offsets");
    if (dtype == entry.end() || !dtype->is_string())
      throw bad("`dtype` is missing or not a string");
    if (shape == entry.end() || !shape->is_array()) throw bad("`shape` is missing or not a list");
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      throw bad("`data_offsets` must be two non-negative integers");
    }
    SafetensorsTensorInfo info;
    info.name = name;
    try {
      info.dtype = dtype_from_safetensors_name(dtype->get<std::string>());
    } catch (const protocol::ValueError& e) {
      throw bad(e.what());
    }
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned() ||
          d.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max())) {
        throw bad("`shape` must hold non-negative 64-bit integers, got " + d.dump());
      }
      info.shape.push_back(d.get<std::int64_t>());
    }
    info.begin = (*offsets)[0].get<std::uint64_t>();
    info.end = (*offsets)[1].get<std::uint64_t>();
    if (info.begin > info.end) throw bad("data_offsets begin after they end");
    if (info.end > data_size) {
      throw bad("data_offsets end at " + std::to_string(info.end) + ", past the " +
                std::to_string(data_size) + "-byte data area");
    }
    std::uint64_t expected = 0;
    try {
      expected = protocol::ParamMeta{name, info.dtype, info.shape}.nbytes();
    } catch (const protocol::ValueError& e) {
      throw bad(e.what());
    }
    if (expected != info.nbytes()) {
      throw bad("shape " + protocol::shape_to_string(info.shape) + " of " +
                std::string(safetensors_dtype_name(info.dtype)) + " needs " +
                std::to_string(expected) + " bytes but data_offsets span " +
                std::to_string(info.nbytes()));
    }
    out.tensors.push_back(std::move(info));
  }

  // The data area is covered exactly, without overlaps or holes, as the reference library
  // requires.
  std::sort(out.tensors.begin(), out.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t cursor = 0;
  for (std::size_t i = 0; i < out.tensors.size(); ++i) {
    const auto& t = out.tensors[i];
    if (t.begin < cursor) {
      throw fail("tensor '" + t.name + "' overlaps tensor '" + out.tensors[i - 1].name + "'");
    }
    if (t.begin > cursor) {
      throw fail("bytes " + std::to_string(cursor) + ".." + std::to_string(t.begin) +
                 " before tensor '" + t.name + "' belong to no tensor");
    }
    cursor = t.end;
  }
  if (cursor != data_size) {
    throw fail("the last " + std::to_string(data_size - cursor) +
               " bytes of the data area belong to no tensor");
  }
  return out;
}

}  // namespace hotswap::model_loader
