// y = x Wᵀ for the model's linear layers, picking the fastest exact-enough way per shape and
// device (int8 weights have their own, in int8_quantization.hpp).
//
// On the CPU, libtorch 1.13 (Debian's) hands every matmul to OpenBLAS's sgemm, which packs the
// whole weight matrix before multiplying: for the few rows of a decode step that packing costs
// more than the multiply, and a bfloat16 matmul falls back to a scalar loop (no bf16 arithmetic
// on AVX2 CPUs), 4–70× slower than float32. So:
//  - up to kSmallBatchRows rows, a dot-product kernel reads each weight row once, bfloat16 or
//    float32, widening to float32 on the fly (AVX2+FMA where the CPU has them); one row of a
//    float32 model goes to OpenBLAS's sgemv, which packs nothing and streams faster still;
//  - more rows of a bfloat16 model (a prefill) go through sgemm on a float32 copy of the weight,
//    made per call: cheap next to a multiply over that many rows;
//  - the result is rounded to x's dtype once, after float32 accumulation: what transformers'
//    bfloat16 matmuls compute, and closer to float32 than libtorch 1.13's bf16 loop.
// Elsewhere (a GPU, float16 storage, the meta device) it is at::matmul, as before.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace hotswap::model_loader {

inline constexpr std::int64_t kSmallBatchRows = 8;

// x [rows, in] (any floating dtype), weight [out, in]: x Wᵀ [rows, out] in x's dtype, or in
// `out` where given (float32 logits from bfloat16 activations, rounded once, not twice).
at::Tensor apply_linear(const at::Tensor& x, const at::Tensor& weight,
                        std::optional<at::ScalarType> out = std::nullopt);

// Which dot-product kernel: the fastest this CPU runs (AVX2 + FMA where it has them), or the
// portable one that runs everywhere (so that tests drive it on any machine).
enum class DotKernel { kBest, kPortable };

// The small-batch kernel alone, for tests and benchmarks: x [rows, in], weight [out, in]
// contiguous float32 or bfloat16 on the CPU; float32 [rows, out].
at::Tensor small_batch_linear(const at::Tensor& x, const at::Tensor& weight,
                              DotKernel kernel = DotKernel::kBest);

}  // namespace hotswap::model_loader
