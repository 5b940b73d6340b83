#include "transport/torch_dtype.hpp"

#include <torch/version.h>

#include <array>
#include <string>

#include "protocol/errors.hpp"

// float8 types arrived in libtorch 2.1; Debian's 1.13 has none.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define HOTSWAP_TORCH_HAS_FLOAT8 1
#else
#define HOTSWAP_TORCH_HAS_FLOAT8 0
#endif

namespace hotswap::transport {
namespace {

using protocol::DType;

struct Pair {
  DType dtype;
  c10::ScalarType type;
};

// The one table both directions read.
constexpr std::array kPairs {
  Pair{DType::kFloat32, c10::ScalarType::Float}, Pair{DType::kFloat16, c10::ScalarType::Half},
      Pair{DType::kBFloat16, c10::ScalarType::BFloat16},
      Pair{DType::kFloat64, c10::ScalarType::Double}, Pair{DType::kInt8, c10::ScalarType::Char},
      Pair{DType::kUInt8, c10::ScalarType::Byte}, Pair{DType::kInt16, c10::ScalarType::Short},
      Pair{DType::kInt32, c10::ScalarType::Int}, Pair{DType::kInt64, c10::ScalarType::Long},
      Pair{DType::kBool, c10::ScalarType::Bool},
#if HOTSWAP_TORCH_HAS_FLOAT8
      Pair{DType::kFloat8E4M3FN, c10::ScalarType::Float8_e4m3fn},
      Pair{DType::kFloat8E5M2, c10::ScalarType::Float8_e5m2},
#endif
};

}  // namespace

c10::ScalarType to_scalar_type(DType dtype) {
  for (const auto& p : kPairs) {
    if (p.dtype == dtype) return p.type;
  }
  throw protocol::ValueError("dtype " + std::string(protocol::dtype_name(dtype)) +
                             " needs libtorch >= 2.1; this build uses libtorch " + TORCH_VERSION);
}

DType from_scalar_type(c10::ScalarType type) {
  for (const auto& p : kPairs) {
    if (p.type == type) return p.dtype;
  }
  throw protocol::ValueError(std::string("torch dtype ") + c10::toString(type) +
                             " has no name on vLLM's weight-transfer wire");
}

}  // namespace hotswap::transport
