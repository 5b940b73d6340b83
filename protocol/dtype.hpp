// DType: the element types that travel on vLLM's wire, named as torch names them.
// A producer writes `str(tensor.dtype).split(".")[-1]` and vLLM resolves the name with
// `getattr(torch, name)`, so the canonical names are torch's attribute names and torch's aliases
// (`float`, `half`, `double`, `long`, `int`, `short`) resolve too.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>
#include <string_view>

namespace hotswap::protocol {

enum class DType {
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat64,
  kInt8,
  kUInt8,
  kInt16,
  kInt32,
  kInt64,
  kBool,
  kFloat8E4M3FN,
  kFloat8E5M2,
};

// Resolves a wire name (canonical or alias). An unknown name is a ValueError naming it.
DType dtype_from_name(std::string_view name);

// The canonical wire name: what `str(torch.<dtype>).split(".")[-1]` prints.
std::string_view dtype_name(DType dtype) noexcept;

// Bytes per element.
std::size_t item_size(DType dtype) noexcept;

bool is_floating_point(DType dtype) noexcept;

// Prints the canonical name.
std::ostream& operator<<(std::ostream& out, DType dtype);

}  // namespace hotswap::protocol
