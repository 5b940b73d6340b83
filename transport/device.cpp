#include "transport/device.hpp"

#include "protocol/errors.hpp"

#ifdef HOTSWAP_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "transport/cuda_check.hpp"
#endif

namespace hotswap::transport {

void synchronize_device(const c10::Device& device) {
  if (device.is_cpu()) return;
  if (!device.is_cuda()) {
    throw protocol::RuntimeError("cannot synchronize device " + device.str() +
                                 ": hotswap supports cpu and cuda devices");
  }
#ifdef HOTSWAP_WITH_CUDA
  HOTSWAP_CUDA_CHECK(cudaSetDevice(device.has_index() ? device.index() : 0));
  HOTSWAP_CUDA_CHECK(cudaDeviceSynchronize());
#else
  throw protocol::RuntimeError("device " + device.str() +
                               " needs a hotswap built with CUDA (HOTSWAP_WITH_CUDA=ON)");
#endif
}

GpuRuntimeInfo gpu_runtime_info() {
  GpuRuntimeInfo info;
#ifdef HOTSWAP_WITH_CUDA
  info.built_with_cuda = true;
  cudaRuntimeGetVersion(&info.cuda_runtime_version);
  ncclGetVersion(&info.nccl_version);
  // Without a driver this returns cudaErrorInsufficientDriver (35) and leaves the count alone.
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess) {
    info.device_count = count;
  } else {
    info.device_error = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
  }
#else
  info.device_error = "built without CUDA";
#endif
  return info;
}

}  // namespace hotswap::transport
