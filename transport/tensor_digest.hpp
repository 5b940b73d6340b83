// SHA-256 of a tensor's bytes (row-major, native little-endian), the digest vLLM's weight
// checker uses; both the worker and the trainer SDK compute it, so both can compare.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace hotswap::transport {

// Lower-case hex. Non-contiguous or non-CPU tensors are copied to contiguous CPU memory first.
std::string sha256_hex(const at::Tensor& tensor);

}  // namespace hotswap::transport
