#include "transport/cuda_ipc.hpp"

#include <cstdio>

#include "protocol/errors.hpp"
#include "transport/device.hpp"

#ifdef HOTSWAP_WITH_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>

#include "transport/cuda_check.hpp"
#include "transport/cuda_stream.hpp"
#endif

namespace hotswap::transport {

std::string format_gpu_uuid(const std::array<std::uint8_t, 16>& b) {
  char text[37];
  std::snprintf(text, sizeof(text),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return text;
}

#ifndef HOTSWAP_WITH_CUDA

std::string device_uuid(int) {
  throw_needs_gpu_build("naming a GPU needs");
}
protocol::IpcHandle export_device_memory(const void*, std::size_t) {
  throw_needs_gpu_build("CUDA IPC needs");
}
IpcMapping::IpcMapping(const std::vector<std::uint8_t>&, int) {
  throw_needs_gpu_build("CUDA IPC needs");
}
IpcMapping::~IpcMapping() = default;
IpcMapping::IpcMapping(IpcMapping&&) noexcept = default;
IpcMapping& IpcMapping::operator=(IpcMapping&&) noexcept = default;
void IpcMapping::close() noexcept {}
DeviceBuffer::DeviceBuffer(std::size_t, int) {
  throw_needs_gpu_build("GPU buffers need");
}
DeviceBuffer::~DeviceBuffer() = default;
void copy_device_bytes(void*, const void*, std::size_t, int) {
  throw_needs_gpu_build("copies between GPU buffers need");
}
void wait_for_current_stream(int) {
  throw_needs_gpu_build("waiting for a GPU stream needs");
}

#else

std::string device_uuid(int device) {
  cudaDeviceProp properties{};
  HOTSWAP_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  std::array<std::uint8_t, 16> bytes{};
  std::memcpy(bytes.data(), properties.uuid.bytes, bytes.size());
  return format_gpu_uuid(bytes);
}

namespace {

// The allocation that contains `data`: the driver's cuMemGetAddressRange, reached through the
// runtime's entry-point lookup so that nothing links libcuda (absent on machines without a GPU).
// A driver call acts in the current context, so the pointer's own device is made current first.
std::pair<const std::uint8_t*, std::size_t> allocation_of(const void* data) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static GetAddressRange get_range = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    HOTSWAP_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020,
                                                        cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
      throw protocol::TransferError("the CUDA driver offers no cuMemGetAddressRange");
    }
    return reinterpret_cast<GetAddressRange>(fn);
  }();
  const std::string where = std::to_string(reinterpret_cast<std::uintptr_t>(data));
  cudaPointerAttributes attributes{};
  cudaError_t known = cudaPointerGetAttributes(&attributes, data);
  if (known != cudaSuccess || attributes.type != cudaMemoryTypeDevice) {
    cudaGetLastError();
    throw protocol::ValueError("cannot export memory at " + where +
                               " over CUDA IPC: it is not device memory");
  }
  DeviceScope scope(cuda_device(attributes.device));
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult r = get_range(&base, &size, reinterpret_cast<CUdeviceptr>(data));
  if (r != CUDA_SUCCESS) {
    throw protocol::ValueError("cannot export memory at " + where + " of GPU " +
                               std::to_string(attributes.device) +
                               " over CUDA IPC: the driver finds no allocation around it "
                               "(CUresult " +
                               std::to_string(static_cast<int>(r)) + ")");
  }
  return {reinterpret_cast<const std::uint8_t*>(base), size};
}

}  // namespace

protocol::IpcHandle export_device_memory(const void* data, std::size_t bytes) {
  auto [base, size] = allocation_of(data);
  cudaIpcMemHandle_t handle;
  cudaError_t exported = cudaIpcGetMemHandle(&handle, const_cast<std::uint8_t*>(base));
  if (exported != cudaSuccess) {
    cudaGetLastError();
    throw protocol::ValueError(
        std::string("cannot export a tensor over CUDA IPC: cudaIpcGetMemHandle refused its "
                    "allocation (") +
        cudaGetErrorName(exported) +
        "). Memory from PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF="
        "expandable_segments:True) or from the cudaMallocAsync allocator cannot be shared "
        "this way: run the trainer with the default caching allocator, or use the packed mode, "
        "whose buffer hotswap allocates itself");
  }
  protocol::IpcHandle out;
  const auto* raw = reinterpret_cast<const std::uint8_t*>(&handle);
  static_assert(sizeof(handle) == protocol::kCudaIpcHandleBytes);
  out.handle.assign(raw, raw + sizeof(handle));
  out.offset_bytes = static_cast<std::uint64_t>(static_cast<const std::uint8_t*>(data) - base);
  out.size_bytes = bytes;
  if (out.offset_bytes + bytes > size) {
    throw protocol::ValueError("an IPC export of " + std::to_string(bytes) +
                               " bytes runs past the end of its allocation");
  }
  return out;
}

IpcMapping::IpcMapping(const std::vector<std::uint8_t>& handle, int device) : device_(device) {
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
    throw protocol::ValueError("a CUDA IPC handle is " +
                               std::to_string(sizeof(cudaIpcMemHandle_t)) + " bytes, got " +
                               std::to_string(handle.size()));
  }
  DeviceScope scope(cuda_device(device));
  cudaIpcMemHandle_t raw;
  std::memcpy(&raw, handle.data(), sizeof(raw));
  void* base = nullptr;
  HOTSWAP_CUDA_CHECK(cudaIpcOpenMemHandle(&base, raw, cudaIpcMemLazyEnablePeerAccess));
  base_ = static_cast<std::uint8_t*>(base);
}

void IpcMapping::close() noexcept {
  if (base_ == nullptr) return;
  try {
    DeviceScope scope(cuda_device(device_));
    cudaIpcCloseMemHandle(base_);
  } catch (...) {  // the device is gone: nothing left to unmap
  }
  base_ = nullptr;
}

IpcMapping::~IpcMapping() {
  close();
}

IpcMapping::IpcMapping(IpcMapping&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), device_(other.device_) {}

IpcMapping& IpcMapping::operator=(IpcMapping&& other) noexcept {
  if (this != &other) {
    close();
    base_ = std::exchange(other.base_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device) : size_(bytes) {
  DeviceScope scope(cuda_device(device));
  void* p = nullptr;
  HOTSWAP_CUDA_CHECK(cudaMalloc(&p, bytes));
  data_ = static_cast<std::uint8_t*>(p);
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

void copy_device_bytes(void* destination, const void* source, std::size_t bytes, int device) {
  copy_device_bytes(destination, source, bytes, torch_current_stream(device));
}

void wait_for_current_stream(int device) {
  HOTSWAP_CUDA_CHECK(cudaStreamSynchronize(torch_current_stream(device)));
}

#endif

}  // namespace hotswap::transport
