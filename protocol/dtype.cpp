#include "protocol/dtype.hpp"

#include <array>
#include <ostream>

#include "protocol/errors.hpp"

namespace hotswap::protocol {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t item_size;
  bool floating;
};

constexpr std::array<DTypeInfo, 12> kDTypes{{
    {DType::kFloat32, "float32", 4, true},
    {DType::kFloat16, "float16", 2, true},
    {DType::kBFloat16, "bfloat16", 2, true},
    {DType::kFloat64, "float64", 8, true},
    {DType::kInt8, "int8", 1, false},
    {DType::kUInt8, "uint8", 1, false},
    {DType::kInt16, "int16", 2, false},
    {DType::kInt32, "int32", 4, false},
    {DType::kInt64, "int64", 8, false},
    {DType::kBool, "bool", 1, false},
    {DType::kFloat8E4M3FN, "float8_e4m3fn", 1, true},
    {DType::kFloat8E5M2, "float8_e5m2", 1, true},
}};

struct Alias {
  std::string_view alias;
  DType dtype;
};

// torch's attribute aliases: torch.float is torch.float32, and so on.
constexpr std::array<Alias, 6> kAliases{{
    {"float", DType::kFloat32},
    {"half", DType::kFloat16},
    {"double", DType::kFloat64},
    {"long", DType::kInt64},
    {"int", DType::kInt32},
    {"short", DType::kInt16},
}};

const DTypeInfo& info(DType dtype) noexcept {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d;
  }
  return kDTypes[0];  // unreachable for a valid enum value
}

}  // namespace

DType dtype_from_name(std::string_view name) {
  for (const auto& d : kDTypes) {
    if (d.name == name) return d.dtype;
  }
  for (const auto& a : kAliases) {
    if (a.alias == name) return a.dtype;
  }
  throw ValueError("unknown dtype name '" + std::string(name) +
                   "' (expected a torch dtype name such as 'bfloat16' or 'float32')");
}

std::string_view dtype_name(DType dtype) noexcept {
  return info(dtype).name;
}

std::size_t item_size(DType dtype) noexcept {
  return info(dtype).item_size;
}

bool is_floating_point(DType dtype) noexcept {
  return info(dtype).floating;
}

std::ostream& operator<<(std::ostream& out, DType dtype) {
  return out << dtype_name(dtype);
}

}  // namespace hotswap::protocol
