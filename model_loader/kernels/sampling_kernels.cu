// Sampling without sorting the vocabulary: FlashInfer's rejection samplers (sampling.cuh), with a
// Philox seed and offset per row.
#include <flashinfer/sampling.cuh>

#include "model_loader/kernels/kernel_dispatch.cuh"

namespace hotswap::model_loader::kernels {

KernelStatus sample_top_k_top_p(const float* probs, const std::int32_t* top_k, const float* top_p,
                                const std::uint64_t* seeds, const std::uint64_t* offsets,
                                std::int32_t* tokens, std::uint32_t rows, std::uint32_t vocab,
                                StreamHandle stream) {
  if (rows == 0) return cudaSuccess;
  return flashinfer::sampling::TopKTopPSamplingFromProb<float, std::int32_t>(
      const_cast<float*>(probs), const_cast<std::int32_t*>(top_k), const_cast<float*>(top_p),
      tokens, /*valid=*/nullptr, /*indices=*/nullptr, rows, /*top_k_val=*/0, /*top_p_val=*/1.0f,
      vocab, /*deterministic=*/true, const_cast<std::uint64_t*>(seeds), /*seed_val=*/0,
      const_cast<std::uint64_t*>(offsets), /*offset_val=*/0, detail::as_stream(stream),
      /*seed_stride=*/1, /*offset_stride=*/1);
}

KernelStatus sample_min_p(const float* probs, const float* min_p, const std::uint64_t* seeds,
                          const std::uint64_t* offsets, std::int32_t* tokens, std::uint32_t rows,
                          std::uint32_t vocab, StreamHandle stream) {
  if (rows == 0) return cudaSuccess;
  return flashinfer::sampling::MinPSamplingFromProb<float, std::int32_t>(
      const_cast<float*>(probs), const_cast<float*>(min_p), tokens, /*valid=*/nullptr,
      /*indices=*/nullptr, rows, /*min_p_val=*/0.0f, vocab, /*deterministic=*/true,
      const_cast<std::uint64_t*>(seeds), /*seed_val=*/0, const_cast<std::uint64_t*>(offsets),
      /*offset_val=*/0, detail::as_stream(stream), /*seed_stride=*/1, /*offset_stride=*/1);
}

}  // namespace hotswap::model_loader::kernels
