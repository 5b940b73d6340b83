// The `ipc` backend's payloads: a trainer and a worker sharing one GPU. vLLM ships CUDA IPC
// handles as a Python pickle (`ipc_handles_pickled`); hotswap never unpickles anything, so a
// handle travels as JSON instead:
//
//   "ipc_handles": [ {"<gpu uuid>": {"handle": "<base64 of the 64-byte cudaIpcMemHandle_t>",
//                                    "offset_bytes": 0, "size_bytes": 4096}}, ... ]
//
// one object per parameter (unpacked), or a single {uuid: handle} object for a packed chunk
// (one buffer reused for every chunk, with `tensor_sizes` giving each parameter's bytes in it).
// Keys are the physical GPUs' UUIDs as torch prints them (str(get_device_properties(i).uuid):
// lowercase 8-4-4-4-12 hex, no "GPU-" prefix), so a multi-GPU trainer may offer one per GPU.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/param_meta.hpp"

namespace hotswap::protocol {

inline constexpr std::size_t kCudaIpcHandleBytes = 64;

struct IpcHandle {
  std::vector<std::uint8_t> handle;  // the raw cudaIpcMemHandle_t bytes
  std::uint64_t offset_bytes = 0;    // where the data starts inside the exported allocation
  std::uint64_t size_bytes = 0;      // how many bytes from there belong to this export

  bool operator==(const IpcHandle&) const = default;
};

// One export, offered per GPU UUID.
using IpcHandleSet = std::map<std::string, IpcHandle>;

struct IpcInitInfo {
  bool packed = false;

  static IpcInitInfo from_json(const nlohmann::json& object);
  nlohmann::json to_json() const;
};

struct IpcUpdateInfo {
  std::vector<ParamMeta> params;
  std::vector<IpcHandleSet> handles;          // unpacked: one per parameter
  std::optional<IpcHandleSet> packed_handle;  // packed: the chunk's buffer
  std::vector<std::uint64_t> tensor_sizes;    // packed: bytes of each parameter in the chunk

  bool is_packed() const { return packed_handle.has_value(); }

  static IpcUpdateInfo from_json(const nlohmann::json& object);
  nlohmann::json to_json() const;
};

}  // namespace hotswap::protocol
