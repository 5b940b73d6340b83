// What every FlashInfer instantiation file shares: the element type and head dim a call names,
// turned into template arguments (only the ones flashinfer_kernels.hpp lists), and the stream.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "model_loader/kernels/flashinfer_kernels.hpp"

namespace hotswap::model_loader::kernels::detail {

// Calls f with a value of the CUDA element type `dtype` names (__half or __nv_bfloat16).
template <typename F>
cudaError_t with_dtype(KernelDType dtype, F&& f) {
  switch (dtype) {
    case KernelDType::kFloat16:
      return f(__half{});
    case KernelDType::kBFloat16:
      return f(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

// Calls f with std::integral_constant<uint32_t, head_dim> for the instantiated head dims.
template <typename F>
cudaError_t with_head_dim(std::uint32_t head_dim, F&& f) {
  switch (head_dim) {
    case 64:
      return f(std::integral_constant<std::uint32_t, 64>{});
    case 128:
      return f(std::integral_constant<std::uint32_t, 128>{});
    default:
      return cudaErrorInvalidValue;
  }
}

inline cudaStream_t as_stream(StreamHandle stream) {
  return static_cast<cudaStream_t>(stream);
}

template <typename T>
T* mutable_ptr(const void* p) {
  return const_cast<T*>(static_cast<const T*>(p));
}

}  // namespace hotswap::model_loader::kernels::detail
