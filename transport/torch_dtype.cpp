#include "transport/torch_dtype.hpp"

#include <torch/version.h>

#include <string>

#include "protocol/errors.hpp"

// float8 types arrived in libtorch 2.1; Debian's 1.13 has none.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define HOTSWAP_TORCH_HAS_FLOAT8 1
#else
#define HOTSWAP_TORCH_HAS_FLOAT8 0
#endif

namespace hotswap::transport {

using protocol::DType;

c10::ScalarType to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return c10::ScalarType::Float;
    case DType::kFloat16:
      return c10::ScalarType::Half;
    case DType::kBFloat16:
      return c10::ScalarType::BFloat16;
    case DType::kFloat64:
      return c10::ScalarType::Double;
    case DType::kInt8:
      return c10::ScalarType::Char;
    case DType::kUInt8:
      return c10::ScalarType::Byte;
    case DType::kInt16:
      return c10::ScalarType::Short;
    case DType::kInt32:
      return c10::ScalarType::Int;
    case DType::kInt64:
      return c10::ScalarType::Long;
    case DType::kBool:
      return c10::ScalarType::Bool;
#if HOTSWAP_TORCH_HAS_FLOAT8
    case DType::kFloat8E4M3FN:
      return c10::ScalarType::Float8_e4m3fn;
    case DType::kFloat8E5M2:
      return c10::ScalarType::Float8_e5m2;
#else
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E5M2:
      break;
#endif
  }
  throw protocol::ValueError("dtype " + std::string(protocol::dtype_name(dtype)) +
                             " needs libtorch >= 2.1; this build uses libtorch " + TORCH_VERSION);
}

DType from_scalar_type(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return DType::kFloat32;
    case c10::ScalarType::Half:
      return DType::kFloat16;
    case c10::ScalarType::BFloat16:
      return DType::kBFloat16;
    case c10::ScalarType::Double:
      return DType::kFloat64;
    case c10::ScalarType::Char:
      return DType::kInt8;
    case c10::ScalarType::Byte:
      return DType::kUInt8;
    case c10::ScalarType::Short:
      return DType::kInt16;
    case c10::ScalarType::Int:
      return DType::kInt32;
    case c10::ScalarType::Long:
      return DType::kInt64;
    case c10::ScalarType::Bool:
      return DType::kBool;
#if HOTSWAP_TORCH_HAS_FLOAT8
    case c10::ScalarType::Float8_e4m3fn:
      return DType::kFloat8E4M3FN;
    case c10::ScalarType::Float8_e5m2:
      return DType::kFloat8E5M2;
#endif
    default:
      break;
  }
  throw protocol::ValueError(std::string("torch dtype ") + c10::toString(type) +
                             " has no name on vLLM's weight-transfer wire");
}

}  // namespace hotswap::transport
