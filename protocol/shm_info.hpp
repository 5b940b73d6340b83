// The `shm` backend's payloads: the CPU twin of `ipc` for a trainer and workers on one host.
// The trainer creates `segment_names.size()` POSIX shared-memory buffers of
// `packed_buffer_size_bytes` each at the handshake and fills them with packed chunks, rotating
// through the buffers so that it fills one while workers copy out of another. Chunks follow the
// IPC rule (flush before overflowing), so every chunk fits its buffer; the worker derives the
// chunk plan from the round's metadata, exactly as the trainer did. The handshake in each
// segment's header is transport/shm_ring.hpp's.
//
// Zero-copy tensors: a trainer whose weights already live in a shared-memory arena (one more
// POSIX segment, `arena_name` at the handshake) need not copy them into the buffers at all.
// Each round's `arena_offsets` (parallel to `names`) gives the byte offset of such a tensor in
// the arena's data area (after the segment's 64-byte header), or -1 for a tensor that travels
// in the packed chunks; the chunk plan covers only
// the -1 tensors, in order. Workers copy arena tensors straight into the model: one copy of
// each byte instead of two, as `ipc` reads a trainer's CUDA tensors through their handles.
//
// Stream window: a round whose `stream_window_bytes` is positive passes each chunk through a
// circular window of that many bytes at the start of its buffer instead of laying it out whole
// (transport/shm_ring.hpp); a trainer sets it only once every worker joined the window at its
// handshake, so a worker of an older build never sees it. Absent or 0: whole chunks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/nccl_info.hpp"
#include "protocol/param_meta.hpp"

namespace hotswap::protocol {

struct ShmInitInfo {
  std::vector<std::string> segment_names;  // POSIX names: "/hotswap-<...>"
  std::int64_t packed_buffer_size_bytes = kDefaultPackedBufferSizeBytes;
  std::optional<std::string> arena_name;  // the trainer's weights, read in place

  static ShmInitInfo from_json(const nlohmann::json& object);
  nlohmann::json to_json() const;
};

struct ShmUpdateInfo {
  std::vector<ParamMeta> params;
  // Sequence number of the round's first chunk; chunk c travels as first_sequence + c in
  // buffer (first_sequence + c) % segment count. Rounds continue the numbering.
  std::int64_t first_sequence = 1;
  // Parallel to params: a tensor's byte offset in the arena, or kInBuffers. Empty when no
  // tensor of the round is in the arena.
  std::vector<std::int64_t> arena_offsets;
  static constexpr std::int64_t kInBuffers = -1;
  // Bytes of the circular window each chunk streams through; 0: chunks travel whole.
  std::int64_t stream_window_bytes = 0;

  bool in_arena(std::size_t i) const {
    return !arena_offsets.empty() && arena_offsets[i] != kInBuffers;
  }
  // The parameters that travel in the packed chunks, in order, and their indices in params.
  std::vector<ParamMeta> buffered_params(std::vector<std::size_t>* indices = nullptr) const;

  static ShmUpdateInfo from_json(const nlohmann::json& object);
  nlohmann::json to_json() const;
};

// Every segment a hotswap trainer makes is named "/hotswap-<pid>-...", and a worker opens no
// other: a control client cannot point a worker at some other program's shared memory.
inline constexpr std::string_view kShmNamePrefix = "/hotswap-";

// True for a name shm_open accepts portably: a leading '/', no other '/', 2..255 characters.
bool is_valid_shm_name(const std::string& name);
// A valid name with hotswap's prefix.
bool is_hotswap_shm_name(const std::string& name);

}  // namespace hotswap::protocol
