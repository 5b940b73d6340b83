#include "transport/device.hpp"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <algorithm>

#include "protocol/errors.hpp"

#ifdef HOTSWAP_WITH_CUDA
#include <cuda.h>
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
    // libtorch's CUDA hooks are registered only where its CUDA half is built and loaded; with
    // them, hasCUDA() is false only because no device answered.
    throw protocol::ValueError(
        flag + why_no_cuda_device(at::detail::getCUDAHooks().isBuilt(), gpu_runtime_info()));
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

#ifdef HOTSWAP_WITH_CUDA
namespace {

int runtime_current_device() {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: the cudaSetDevice that follows says so
    return -1;
  }
  return current;
}

// Through the driver's entry points, which the runtime hands out: linking libcuda itself would
// stop every binary from loading on a machine without a driver (CI).
bool runtime_has_primary_context(int index) {
  using DeviceGet = CUresult (*)(CUdevice*, int);
  using PrimaryCtxGetState = CUresult (*)(CUdevice, unsigned int*, int*);
  static const auto entry = [](const char* name) -> void* {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    cudaError_t status =
        cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
#else
    cudaError_t status = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &found);
#endif
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return fn;
  };
  static const auto device_get = reinterpret_cast<DeviceGet>(entry("cuDeviceGet"));
  static const auto get_state =
      reinterpret_cast<PrimaryCtxGetState>(entry("cuDevicePrimaryCtxGetState"));
  if (device_get == nullptr || get_state == nullptr) return false;  // nothing to keep alive
  CUdevice device = 0;
  unsigned int flags = 0;
  int active = 0;
  if (device_get(&device, index) != CUDA_SUCCESS) return false;
  return get_state(device, &flags, &active) == CUDA_SUCCESS && active != 0;
}

void runtime_make_current(int index) {
  const cudaError_t status = cudaSetDevice(index);
  if (status != cudaSuccess) {
    const std::string call = "cudaSetDevice(" + std::to_string(index) + ")";
    throw_cuda_error(status, call.c_str(), __FILE__, __LINE__);
  }
}

}  // namespace

const CudaDeviceRuntime& cuda_device_runtime() {
  static const CudaDeviceRuntime runtime{&runtime_current_device, &runtime_has_primary_context,
                                         &runtime_make_current};
  return runtime;
}
#else
const CudaDeviceRuntime& cuda_device_runtime() {
  static const CudaDeviceRuntime runtime{[] { return -1; }, [](int) { return false; },
                                         [](int) { throw_needs_gpu_build("a CUDA device needs"); }};
  return runtime;
}
#endif

DeviceScope::DeviceScope(const c10::Device& device, const CudaDeviceRuntime& runtime)
    : runtime_(runtime) {
  if (!device.is_cuda() || !built_with_cuda()) return;
  const int wanted = cuda_index(device);
  const int current = runtime_.current();
  if (current == wanted) return;
  runtime_.make_current(wanted);
  if (current >= 0 && runtime_.has_primary_context(current)) previous_ = current;
}

DeviceScope::~DeviceScope() {
  if (previous_ < 0) return;
  try {
    runtime_.make_current(previous_);
  } catch (...) {  // a destructor must not throw; the device stays as the scope left it
  }
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

DeviceMemory device_memory(const c10::Device& device) {
  if (!device.is_cuda()) {
    throw protocol::ValueError("device memory is asked of a CUDA device, not " + device.str());
  }
#ifdef HOTSWAP_WITH_CUDA
  DeviceScope scope(device);
  std::size_t free = 0;
  std::size_t total = 0;
  HOTSWAP_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return DeviceMemory{free, total};
#else
  throw_needs_gpu_build("the memory of " + device.str() + " needs");
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

std::string why_no_cuda_device(bool libtorch_built_with_cuda, const GpuRuntimeInfo& info) {
  if (!libtorch_built_with_cuda) {
    return "this build's libtorch has no CUDA (it is a CPU-only libtorch); run with --device "
           "cpu, or build hotswap against a CUDA libtorch";
  }
  std::string why = "libtorch has CUDA, but this machine offers no GPU: ";
  if (!info.built_with_cuda) {
    why += "no NVIDIA driver is loaded, or no device is visible";
  } else if (info.device_error.starts_with("cudaErrorInsufficientDriver")) {
    why += "no NVIDIA driver is loaded, or it is older than CUDA " +
           std::to_string(info.cuda_runtime_version / 1000) + "." +
           std::to_string(info.cuda_runtime_version % 1000 / 10) + " needs (" + info.device_error +
           ")";
  } else if (info.device_error.starts_with("cudaErrorNoDevice")) {
    why += "the driver sees no device (is CUDA_VISIBLE_DEVICES empty?) (" + info.device_error + ")";
  } else if (!info.device_error.empty()) {
    why += info.device_error;
  } else {
    why += "the driver reports " + std::to_string(info.device_count) + " device(s)";
  }
  return why + "; run with --device cpu";
}

}  // namespace hotswap::transport
