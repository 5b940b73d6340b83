// RMSNorm as Hugging Face's models compute it: normalized in float32, cast back to x's dtype,
// then scaled by the weight.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

#include "model_loader/blocks/block_context.hpp"

namespace hotswap::model_loader {

at::Tensor rms_norm(const BlockContext& ctx, const at::Tensor& x, std::size_t weight, double eps);

}  // namespace hotswap::model_loader
