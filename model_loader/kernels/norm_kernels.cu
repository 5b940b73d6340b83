// RMSNorm and the fused residual-add RMSNorm (FlashInfer's norm.cuh).
#include <flashinfer/norm.cuh>

#include "model_loader/kernels/kernel_dispatch.cuh"

namespace hotswap::model_loader::kernels {

KernelStatus rms_norm(KernelDType dtype, const void* input, const void* weight, void* output,
                      std::uint32_t rows, std::uint32_t width, float eps, StreamHandle stream) {
  return detail::with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    return flashinfer::norm::RMSNorm<T>(
        detail::mutable_ptr<T>(input), detail::mutable_ptr<T>(weight), static_cast<T*>(output),
        rows, width, width, width, eps, /*enable_pdl=*/false, detail::as_stream(stream));
  });
}

KernelStatus fused_add_rms_norm(KernelDType dtype, void* input, void* residual, const void* weight,
                                std::uint32_t rows, std::uint32_t width, float eps,
                                StreamHandle stream) {
  return detail::with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    return flashinfer::norm::FusedAddRMSNorm<T>(
        static_cast<T*>(input), static_cast<T*>(residual), detail::mutable_ptr<T>(weight), rows,
        width, width, width, eps, /*enable_pdl=*/false, detail::as_stream(stream));
  });
}

}  // namespace hotswap::model_loader::kernels
