// The bridge between the wire's DType and libtorch's ScalarType.
#pragma once

#include <c10/core/ScalarType.h>

#include "protocol/dtype.hpp"

namespace hotswap::transport {

// ValueError when this libtorch has no such type (float8 needs libtorch >= 2.1).
c10::ScalarType to_scalar_type(protocol::DType dtype);

// ValueError naming the type when it has no name on vLLM's wire (complex, quantized, ...).
protocol::DType from_scalar_type(c10::ScalarType type);

}  // namespace hotswap::transport
