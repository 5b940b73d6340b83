// Device-level helpers that every engine needs, CUDA or not.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace hotswap::transport {

// The device a `--device` flag names ("cpu", "cuda", "cuda:N"), checked against what this build
// and machine have: a ValueError in one line (never libtorch's dispatcher dump) for a malformed
// name, a CUDA device on a libtorch built without CUDA, or a GPU index the machine lacks.
c10::Device parse_device(const std::string& name);

// Blocks until all work queued on `device` has finished (vLLM's
// `torch.accelerator.synchronize()`), so that a returned update means the bytes have landed.
// A no-op for the CPU; a RuntimeError for a CUDA device in a build without CUDA.
void synchronize_device(const c10::Device& device);

// The three questions a DeviceScope asks the CUDA runtime, as a table, so that its logic is
// tested without a GPU (a fake table) and runs against the real runtime otherwise.
struct CudaDeviceRuntime {
  int (*current)();                  // cudaGetDevice; -1 when it fails (no driver, no device)
  bool (*has_primary_context)(int);  // whether the device's primary context is active
  void (*make_current)(int);         // cudaSetDevice; throws on failure
};
// The CUDA runtime's table (GPU builds); a table that reports no device elsewhere.
const CudaDeviceRuntime& cuda_device_runtime();

// Makes `device` the current CUDA device of this thread for the scope, and restores the one
// before at its end. The CUDA runtime's current device is per thread, and pooled threads serve
// any call: every entry point that calls the runtime or NCCL directly (libtorch's own ops set
// the device from their tensors) opens one. A no-op for the CPU and in builds without CUDA.
//
// A fresh thread's cudaGetDevice says 0 without any context behind it; "restoring" that 0 would
// create a primary context on GPU 0 (CUDA 12 makes one at cudaSetDevice) in every worker, rank
// and trainer process working on cuda:K>0: a few hundred MB of GPU 0 each, and a process on a
// GPU it was never given. So the device before is restored only when its primary context is
// active, as PyTorch's device guard does.
class DeviceScope {
 public:
  explicit DeviceScope(const c10::Device& device) : DeviceScope(device, cuda_device_runtime()) {}
  DeviceScope(const c10::Device& device, const CudaDeviceRuntime& runtime);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  CudaDeviceRuntime runtime_;  // by value: three function pointers, never dangling
  int previous_ = -1;          // -1: nothing to restore
};

// The CUDA index of a CUDA device ("cuda" alone names device 0, as in a fresh process), and
// the device of a CUDA index.
int cuda_index(const c10::Device& device);
c10::Device cuda_device(int index);

// Whether this build has the GPU data planes (HOTSWAP_WITH_CUDA): the one place outside
// transport/'s own sources that a build's GPU support is asked about.
bool built_with_cuda();

// A ValueError for a GPU feature in a build without CUDA: "<subject> a GPU build of hotswap;
// this one was built without CUDA and NCCL (configure with ...)". `subject` carries its verb,
// e.g. "the ipc backend needs".
[[noreturn]] void throw_needs_gpu_build(const std::string& subject);

// What this build and machine offer, for start-up lines and for tests that need a GPU.
struct GpuRuntimeInfo {
  bool built_with_cuda = false;
  int cuda_runtime_version = 0;  // e.g. 13000
  int nccl_version = 0;          // e.g. 22809
  int device_count = 0;          // 0 when no driver or no device
  std::string device_error;      // why device_count is 0, when it is
};

GpuRuntimeInfo gpu_runtime_info();

// A CUDA device's memory now (cudaMemGetInfo on it): what the KV cache's budget starts from.
// A ValueError for the CPU; "needs a GPU build" without CUDA.
struct DeviceMemory {
  std::uint64_t free = 0;
  std::uint64_t total = 0;
};
DeviceMemory device_memory(const c10::Device& device);

// Why libtorch offers no CUDA device, for `--device cuda...`, as one clause that ends with what
// to do: a CPU-only libtorch (build against a CUDA one) is told apart from a CUDA libtorch on a
// machine without a driver or without a visible GPU (run with --device cpu, or find the GPU).
// `libtorch_built_with_cuda`: whether the libtorch in this process has its CUDA half.
std::string why_no_cuda_device(bool libtorch_built_with_cuda, const GpuRuntimeInfo& info);

}  // namespace hotswap::transport
