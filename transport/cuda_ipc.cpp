#include "transport/cuda_ipc.hpp"

#include <cstdio>

#ifdef HOTSWAP_WITH_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>

#include "protocol/errors.hpp"
#include "transport/cuda_check.hpp"
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

#ifdef HOTSWAP_WITH_CUDA

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
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult r = get_range(&base, &size, reinterpret_cast<CUdeviceptr>(data));
  if (r != CUDA_SUCCESS) {
    throw protocol::ValueError("cannot export memory at " +
                               std::to_string(reinterpret_cast<std::uintptr_t>(data)) +
                               " over CUDA IPC: it is not device memory (CUresult " +
                               std::to_string(static_cast<int>(r)) + ")");
  }
  return {reinterpret_cast<const std::uint8_t*>(base), size};
}

}  // namespace

protocol::IpcHandle export_device_memory(const void* data, std::size_t bytes) {
  auto [base, size] = allocation_of(data);
  cudaIpcMemHandle_t handle;
  HOTSWAP_CUDA_CHECK(cudaIpcGetMemHandle(&handle, const_cast<std::uint8_t*>(base)));
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

IpcMapping::IpcMapping(const std::vector<std::uint8_t>& handle, int device) {
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
    throw protocol::ValueError("a CUDA IPC handle is " +
                               std::to_string(sizeof(cudaIpcMemHandle_t)) + " bytes, got " +
                               std::to_string(handle.size()));
  }
  HOTSWAP_CUDA_CHECK(cudaSetDevice(device));
  cudaIpcMemHandle_t raw;
  std::memcpy(&raw, handle.data(), sizeof(raw));
  void* base = nullptr;
  HOTSWAP_CUDA_CHECK(cudaIpcOpenMemHandle(&base, raw, cudaIpcMemLazyEnablePeerAccess));
  base_ = static_cast<std::uint8_t*>(base);
}

void IpcMapping::close() noexcept {
  if (base_ != nullptr) cudaIpcCloseMemHandle(base_);
  base_ = nullptr;
}

IpcMapping::~IpcMapping() {
  close();
}

IpcMapping::IpcMapping(IpcMapping&& other) noexcept : base_(std::exchange(other.base_, nullptr)) {}

IpcMapping& IpcMapping::operator=(IpcMapping&& other) noexcept {
  if (this != &other) {
    close();
    base_ = std::exchange(other.base_, nullptr);
  }
  return *this;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device) : size_(bytes) {
  HOTSWAP_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  HOTSWAP_CUDA_CHECK(cudaMalloc(&p, bytes));
  data_ = static_cast<std::uint8_t*>(p);
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

void copy_device_bytes(void* destination, const void* source, std::size_t bytes) {
  if (bytes == 0) return;
  HOTSWAP_CUDA_CHECK(cudaMemcpy(destination, source, bytes, cudaMemcpyDeviceToDevice));
}

#endif

}  // namespace hotswap::transport
