// y = x Wᵀ for the model's linear layers, picking the fastest exact-enough way per shape and
// device (int8 weights have their own, in int8_quantization.hpp).
//
// On the CPU (torch 2's, whose float32 matmuls are MKL's; no bfloat16 arithmetic on AVX2 CPUs),
// measured on 2-core machines with 2 threads, Llama-sized weights (1024x2816 and the like):
//  - up to kSmallBatchRowsFloat32 rows of a float32 model, and up to kSmallBatchRows of a
//    bfloat16 one, a dot-product kernel reads each weight row once, widening bfloat16 to float32
//    on the fly (AVX2+FMA where the CPU has them), the weight's rows split between the threads.
//    One row against a 896 × 4,864 weight took 120–170 µs against 540 in MKL's sgemv, which runs
//    on one thread; 4 rows 0.5–0.9 ms against 0.5–0.85 in MKL's sgemm on slices (below);
//  - up to kSplitColumnsRows rows (a decode step's batch) go to MKL's sgemm on a contiguous slice
//    of the weight per thread (split_columns_linear in linear.cpp): 8 rows against that weight
//    0.86–0.9 ms against the kernel's 1.25–1.3 and MKL's own split's 1.34, 64 rows 3.7–3.9 ms
//    against 5.1–5.4 (MKL splits the rows, and each of its threads packs the whole weight);
//  - more rows (a prefill) go to MKL's sgemm as they are, and, of a bfloat16 model, through a
//    float32 copy of the weight made per call: cheap next to a multiply over that many rows;
//  - the result is rounded to x's dtype once, after float32 accumulation: what transformers'
//    bfloat16 matmuls compute.
// On a CPU that multiplies bfloat16 itself (AVX512-BF16; a 2-core AMD EPYC here, 2026-12-04),
// kNativeBfloat16Rows rows or more of a bfloat16 model with a bfloat16 result go to libtorch's
// bfloat16 matmul (oneDNN), which also accumulates in float32 and rounds once: 128 rows of a
// 2816x1024 weight took 1.8 ms against 5.2 ms through a float32 copy, and the bench model's
// decode at batch 8 went from 98 to 225 tokens/s, its 128-token prefill from 663 to 1,225. One
// row, and a float32 result (logits, a product before its bias), stay on the dot-product
// kernel, which there takes bfloat16 rows of x as they are and multiplies pairs of bfloat16 with
// AVX512-BF16 (exact products, float32 sums), each weight row loaded once for every row of x;
// up to kPairKernelRows rows of a float32 result go to it in blocks of kSmallBatchRows over
// cache-sized tiles of the weight, each row summed as it would be alone (a row's logits do not
// depend on the batch), instead of through a float32 copy of the weight made per call: 64 rows
// against a 151,936 × 896 LM head (Qwen2.5-0.5B's) took 150–180 ms against 400–420 ms, against a
// 1,152 × 896 qkv 1.1–1.4 ms against 2.0–2.4 (oneDNN's bfloat16 matmul, whose result is rounded
// to bfloat16, 69 and 0.44 ms).
// Elsewhere (a GPU, float16 storage, the meta device) it is at::matmul, as before.
// The bfloat16 figures above were measured with the dot-product kernel on one thread (its
// at::parallel_for ran serially until the library was built with OpenMP, 2026-12-04) against
// oneDNN on two: those thresholds may now sit lower than the best.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "model_loader/cpu_dot.hpp"

namespace hotswap::model_loader {

inline constexpr std::int64_t kSmallBatchRows = 8;
inline constexpr std::int64_t kSmallBatchRowsFloat32 = 4;
inline constexpr std::int64_t kNativeBfloat16Rows = 2;
// Past this many rows (a prefill, a large batch) a float32 copy of the weight costs little next
// to the multiply, and sgemm's register blocking wins: against a 4,864 × 896 weight the pair
// kernel took 5.5 ms for 64 rows and 11.1 for 128, sgemm on a copy 19.4 for 257 and the pair
// kernel 22–23 for 256.
inline constexpr std::int64_t kPairKernelRows = 128;
// Up to this many rows of a float32 product, MKL on a slice of the weight per thread beats its
// own split (128 rows: 6.3 against 6.9–7.8 ms on a 896 × 4,864 weight; 2,048: the same).
inline constexpr std::int64_t kSplitColumnsRows = 128;

// x [rows, in] (any floating dtype), weight [out, in]: x Wᵀ [rows, out] in x's dtype, or in
// `out` where given (float32 logits from bfloat16 activations, rounded once, not twice).
at::Tensor apply_linear(const at::Tensor& x, const at::Tensor& weight,
                        std::optional<at::ScalarType> out = std::nullopt);

// Whether the CPU multiplies bfloat16 itself (AVX512-BF16: Zen 4, Cooper Lake, Sapphire Rapids
// and later): libtorch's bfloat16 matmul (oneDNN) runs on it, and so does the pair kernel.
bool has_native_bfloat16();

// The small-batch kernel alone, for tests and benchmarks: x [rows, in], weight [out, in]
// contiguous float32 or bfloat16 on the CPU; float32 [rows, out]. kBest: AVX512-BF16 pairs for
// bfloat16 x and weights, else cpu_dot's fastest; kPortable: the portable loops.
at::Tensor small_batch_linear(const at::Tensor& x, const at::Tensor& weight,
                              DotKernel kernel = DotKernel::kBest);

}  // namespace hotswap::model_loader
