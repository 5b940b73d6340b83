#include "transport/device.hpp"

#include <ATen/Context.h>

#include <algorithm>

#include "protocol/errors.hpp"

#ifdef HOTSWAP_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "transport/cuda_check.hpp"
#endif

namespace hotswap::transport {

bool built_with_cuda() {
#ifdef HOTSWAP_WITH_CUDA
  return true;
#else
  return false;
#endif
}

void throw_needs_gpu_build(const std::string& subject) {
  throw protocol::ValueError(subject +
                             " a GPU build of hotswap; this one was built without CUDA and NCCL "
                             "(configure with -DHOTSWAP_WITH_CUDA=ON on a machine that has them)");
}

c10::Device parse_device(const std::string& name) {
  const std::string flag = "--device " + name + ": ";
  int index = -1;
  if (name == "cpu") return c10::Device(c10::kCPU);
  if (name != "cuda") {
    const std::string prefix = "cuda:";
    if (!name.starts_with(prefix) || name.size() == prefix.size() ||
        name.size() > prefix.size() + 4 ||
        name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
      throw protocol::ValueError(flag + "expected cpu, cuda or cuda:N");
    }
    index = std::stoi(name.substr(prefix.size()));
  }
  if (!at::hasCUDA()) {
    throw protocol::ValueError(flag +
                               "this build's libtorch has no CUDA (it is a CPU-only libtorch); "
                               "run with --device cpu, or build hotswap against a CUDA libtorch");
  }
  const auto info = gpu_runtime_info();
  if (info.built_with_cuda && index >= info.device_count) {
    throw protocol::ValueError(flag + "this machine has " + std::to_string(info.device_count) +
                               " GPU(s)" +
                               (info.device_error.empty() ? "" : " (" + info.device_error + ")"));
  }
  // "cuda" is device 0, named: engines and CUDA calls need an index, and a bare "cuda" would
  // follow whatever device a pooled thread last used.
  return cuda_device(std::max(index, 0));
}

int cuda_index(const c10::Device& device) {
  return device.has_index() ? device.index() : 0;
}

c10::Device cuda_device(int index) {
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

DeviceScope::DeviceScope(const c10::Device& device) {
#ifdef HOTSWAP_WITH_CUDA
  if (!device.is_cuda()) return;
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {  // no driver or no device: cudaSetDevice says so
    cudaGetLastError();
    current = -1;
  }
  if (current == cuda_index(device)) return;
  HOTSWAP_CUDA_CHECK(cudaSetDevice(cuda_index(device)));
  previous_ = current;
#else
  (void)device;
#endif
}

DeviceScope::~DeviceScope() {
#ifdef HOTSWAP_WITH_CUDA
  if (previous_ >= 0) cudaSetDevice(previous_);
#endif
}

void synchronize_device(const c10::Device& device) {
  if (device.is_cpu()) return;
  if (!device.is_cuda()) {
    throw protocol::RuntimeError("cannot synchronize device " + device.str() +
                                 ": hotswap supports cpu and cuda devices");
  }
#ifdef HOTSWAP_WITH_CUDA
  DeviceScope scope(device);
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
