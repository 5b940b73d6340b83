// CUDA IPC for the `ipc` backend (a trainer and a worker sharing one GPU), as small RAII types
// over the CUDA runtime's IPC calls. Handles travel as JSON (protocol/ipc_info.hpp): the raw
// cudaIpcMemHandle_t bytes, the offset of the export inside its allocation (a tensor from a
// caching allocator lives inside a larger block, and a handle always names the whole block),
// and its size.
//
// Declared in every build; in a build without CUDA each call (and each constructor) throws the
// "needs a GPU build" ValueError.
//
// GPUs are named by the UUID string torch prints for `get_device_properties(i).uuid`
// (lowercase 8-4-4-4-12 hex, no "GPU-" prefix): that is how vLLM keys handles.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/ipc_info.hpp"

namespace hotswap::transport {

// "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" for a 16-byte UUID (every build: tested everywhere).
std::string format_gpu_uuid(const std::array<std::uint8_t, 16>& bytes);

// The UUID of CUDA device `device`, formatted as above.
std::string device_uuid(int device);

// An export of `bytes` of device memory at `data` (which may lie inside a larger allocation).
// A ValueError that says why when the memory cannot travel over CUDA IPC: host memory, or
// memory from PyTorch's expandable segments or the cudaMallocAsync allocator, which
// cudaIpcGetMemHandle refuses.
protocol::IpcHandle export_device_memory(const void* data, std::size_t bytes);

// An exported allocation opened in this process (cudaIpcOpenMemHandle), closed when it goes
// away. Open each allocation once: several exports (tensors of one caching-allocator block) may
// share its handle and differ only in offset.
class IpcMapping {
 public:
  // TransferError naming the call when the handle cannot be opened (another GPU's, stale, ...).
  // Closing waits for nothing: the owner synchronizes every copy out of it first.
  IpcMapping(const std::vector<std::uint8_t>& handle, int device);
  ~IpcMapping();
  IpcMapping(IpcMapping&& other) noexcept;
  IpcMapping& operator=(IpcMapping&& other) noexcept;
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;

  // The start of the allocation; an export's bytes begin offset_bytes further.
  const std::uint8_t* base() const { return base_; }

 private:
  void close() noexcept;
  std::uint8_t* base_ = nullptr;
  int device_ = 0;
};

// Device memory of its own (cudaMalloc, not a caching allocator), for a buffer that is exported
// once and reused: the packed IPC buffer.
class DeviceBuffer {
 public:
  DeviceBuffer(std::size_t bytes, int device);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// Byte copy between device pointers on GPU `device`, queued on libtorch's current stream there:
// after the work that wrote the source through libtorch, before the work that reads the
// destination. Asynchronous to the host, as every device-to-device copy is.
void copy_device_bytes(void* destination, const void* source, std::size_t bytes, int device);

// Blocks until libtorch's current stream on GPU `device` has run everything queued on it.
void wait_for_current_stream(int device);

}  // namespace hotswap::transport
