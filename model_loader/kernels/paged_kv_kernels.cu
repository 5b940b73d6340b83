// Appending a step's keys and values to the paged cache (FlashInfer's page.cuh).
#include <flashinfer/page.cuh>

#include "model_loader/kernels/attention_common.cuh"
#include "model_loader/kernels/kernel_dispatch.cuh"

namespace hotswap::model_loader::kernels {
KernelStatus append_paged_kv(KernelDType dtype, const PagedKvView& cache, const void* keys,
                             const void* values, const std::int32_t* sequence_of,
                             const std::int32_t* positions, std::uint32_t tokens,
                             StreamHandle stream) {
  if (tokens == 0) return cudaSuccess;
  return detail::with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const std::size_t stride_n = std::size_t{cache.kv_heads} * cache.head_dim;
    return flashinfer::AppendPagedKVCache<T, std::int32_t>(
        detail::paged_kv<T>(cache), detail::mutable_ptr<T>(keys), detail::mutable_ptr<T>(values),
        const_cast<std::int32_t*>(sequence_of), const_cast<std::int32_t*>(positions), tokens,
        stride_n, cache.head_dim, stride_n, cache.head_dim, detail::as_stream(stream));
  });
}

}  // namespace hotswap::model_loader::kernels
