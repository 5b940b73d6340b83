// The `shm` backend's payloads: the CPU twin of `ipc` for a trainer and workers on one host.
// The trainer creates `segment_names.size()` POSIX shared-memory buffers of
// `packed_buffer_size_bytes` each at the handshake and fills them with packed chunks, rotating
// through the buffers so that it fills one while workers copy out of another. Chunks follow the
// IPC rule (flush before overflowing), so every chunk fits its buffer; the worker derives the
// chunk plan from the round's metadata, exactly as the trainer did. The handshake in each
// segment's header is transport/shm_ring.hpp's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/nccl_info.hpp"
#include "protocol/param_meta.hpp"

namespace hotswap::protocol {

struct ShmInitInfo {
  std::vector<std::string> segment_names;  // POSIX names: "/hotswap-<...>"
  std::int64_t packed_buffer_size_bytes = kDefaultPackedBufferSizeBytes;

  static ShmInitInfo from_json(const nlohmann::json& object);
  nlohmann::json to_json() const;
};

struct ShmUpdateInfo {
  std::vector<ParamMeta> params;
  // Sequence number of the round's first chunk; chunk c travels as first_sequence + c in
  // buffer (first_sequence + c) % segment count. Rounds continue the numbering.
  std::int64_t first_sequence = 1;

  static ShmUpdateInfo from_json(const nlohmann::json& object);
  nlohmann::json to_json() const;
};

// True for a name shm_open accepts portably: a leading '/', no other '/', 2..255 characters.
bool is_valid_shm_name(const std::string& name);

}  // namespace hotswap::protocol
