// SiLU-and-mul over FlashInfer's act_and_mul kernel (activation.cuh), which leaves the launch to
// its caller: one block per row, the widest vector that divides the width (a narrower one keeps
// the second half's loads aligned when it does not, as for widths like 3420).
#include <flashinfer/activation.cuh>

#include <algorithm>

#include "model_loader/kernels/kernel_dispatch.cuh"

namespace hotswap::model_loader::kernels {
namespace {

__device__ __forceinline__ float silu(const float& x) {
  return x / (1.0f + __expf(-x));
}

template <typename T, std::uint32_t kVec>
cudaError_t launch_silu_and_mul(T* output, T* gate_up, std::uint32_t rows, std::uint32_t width,
                                cudaStream_t stream) {
  const auto kernel = flashinfer::activation::act_and_mul_kernel<T, silu, kVec>;
  const int d = static_cast<int>(width);
  void* args[] = {&output, &gate_up, const_cast<int*>(&d)};
  const dim3 blocks(rows);
  const dim3 threads(std::min<std::uint32_t>(width / kVec, 256u));
  return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), blocks, threads, args, 0, stream);
}

}  // namespace

KernelStatus silu_and_mul(KernelDType dtype, const void* gate_up, void* output, std::uint32_t rows,
                          std::uint32_t width, StreamHandle stream) {
  if (rows == 0 || width == 0) return cudaSuccess;
  return detail::with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* in = detail::mutable_ptr<T>(gate_up);
    T* out = static_cast<T*>(output);
    const cudaStream_t s = detail::as_stream(stream);
    if (width % 8 == 0) return launch_silu_and_mul<T, 8>(out, in, rows, width, s);
    if (width % 4 == 0) return launch_silu_and_mul<T, 4>(out, in, rows, width, s);
    if (width % 2 == 0) return launch_silu_and_mul<T, 2>(out, in, rows, width, s);
    return launch_silu_and_mul<T, 1>(out, in, rows, width, s);
  });
}

}  // namespace hotswap::model_loader::kernels
