// Check macros for CUDA runtime and NCCL calls (GPU builds only). A failure throws a
// TransferError that says which call failed and why, then where it is in hotswap's tree:
//   "cudaDeviceSynchronize() failed: cudaErrorLaunchFailure (unspecified launch failure)
//    [at transport/device.cpp:21]"
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

namespace hotswap::transport {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);
[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* call, const char* file,
                                   int line);

}  // namespace hotswap::transport

#define HOTSWAP_CUDA_CHECK(call)                                                          \
  do {                                                                                    \
    cudaError_t hotswap_status_ = (call);                                                 \
    if (hotswap_status_ != cudaSuccess) {                                                 \
      ::hotswap::transport::throw_cuda_error(hotswap_status_, #call, __FILE__, __LINE__); \
    }                                                                                     \
  } while (0)

#define HOTSWAP_NCCL_CHECK(call)                                                          \
  do {                                                                                    \
    ncclResult_t hotswap_status_ = (call);                                                \
    if (hotswap_status_ != ncclSuccess && hotswap_status_ != ncclInProgress) {            \
      ::hotswap::transport::throw_nccl_error(hotswap_status_, #call, __FILE__, __LINE__); \
    }                                                                                     \
  } while (0)
