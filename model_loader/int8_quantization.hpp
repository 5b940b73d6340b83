// int8 weight-only quantization with one float32 scale per output channel (row), the
// post-load processing that makes hotswap's runtime format differ from the checkpoint format,
// as vLLM's online quantization does. Symmetric: q = round(w / s) in [-127, 127], s = max|row|/127.
#pragma once

#include <ATen/core/Tensor.h>

namespace hotswap::model_loader {

struct QuantizedWeight {
  at::Tensor values;  // int8 [out, in]
  at::Tensor scale;   // float32 [out]
};

QuantizedWeight quantize_int8_per_channel(const at::Tensor& weight);

// x @ (values × scale)ᵀ, computed as (x @ valuesᵀ) × scale in x's dtype.
at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& values, const at::Tensor& scale);

}  // namespace hotswap::model_loader
