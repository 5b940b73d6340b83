// Rotary embedding from a cos/sin table (FlashInfer's pos_enc.cuh), in place.
#include <flashinfer/pos_enc.cuh>

#include "model_loader/kernels/kernel_dispatch.cuh"

namespace hotswap::model_loader::kernels {

KernelStatus apply_rotary(KernelDType dtype, void* q, void* k, const float* cos_sin,
                          const std::int32_t* positions, std::uint32_t tokens,
                          std::uint32_t q_heads, std::uint32_t kv_heads, std::uint32_t rotary_dim,
                          std::uint32_t head_dim, StreamHandle stream) {
  if (tokens == 0) return cudaSuccess;
  return detail::with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* q_data = static_cast<T*>(q);
    auto* k_data = static_cast<T*>(k);
    const std::size_t q_stride_n = std::size_t{q_heads} * head_dim;
    const std::size_t k_stride_n = std::size_t{kv_heads} * head_dim;
    // In place: the rotated output is the input, with the input's strides. Hugging Face's
    // rotate_half pairs dim i with i + rotary_dim / 2: FlashInfer's non-interleaved mode.
    return flashinfer::BatchQKApplyRotaryPosIdsCosSinCache<T, std::int32_t>(
        q_data, k_data, q_data, k_data, const_cast<float*>(cos_sin),
        const_cast<std::int32_t*>(positions), tokens, q_heads, kv_heads, rotary_dim, head_dim,
        q_stride_n, head_dim, k_stride_n, head_dim, q_stride_n, head_dim, k_stride_n, head_dim,
        /*interleave=*/false, detail::as_stream(stream));
  });
}

}  // namespace hotswap::model_loader::kernels
