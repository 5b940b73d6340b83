// The `nccl` backend's payloads (vLLM's NCCLWeightTransferInitInfo / UpdateInfo). The `gloo`
// backend speaks the same protocol over gloo and takes the same payloads.
//
// vLLM moved the packing params between wire epochs: released vLLM (E1) sent them in every
// `update_info`, current main (E3) sends them once in `init_info`. hotswap accepts both; a value
// in `update_info` overrides the handshake's for that round. `is_checkpoint_format` (E1) is
// accepted and ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/param_meta.hpp"

namespace hotswap::protocol {

inline constexpr std::int64_t kDefaultPackedBufferSizeBytes = std::int64_t{1} << 30;  // 1 GiB
inline constexpr std::int64_t kDefaultPackedNumBuffers = 2;
inline constexpr std::size_t kNcclUniqueIdBytes = 128;

// How the bytes of one round are framed on the wire.
struct PackingParams {
  bool packed = false;  // vLLM's worker default when nobody says otherwise
  std::int64_t packed_buffer_size_bytes = kDefaultPackedBufferSizeBytes;
  std::int64_t packed_num_buffers = kDefaultPackedNumBuffers;

  bool operator==(const PackingParams&) const = default;
};

struct NcclInitInfo {
  std::optional<std::string> master_address;
  std::optional<std::int64_t> master_port;
  std::int64_t rank_offset = 0;
  std::int64_t world_size = 0;
  std::optional<std::string> nccl_unique_id_b64;
  std::vector<std::uint8_t> nccl_unique_id;  // the 128 decoded bytes when the uid is given
  PackingParams packing;
  // vLLM 0.34: check every later update against `metadata`, the manifest of every tensor the
  // trainer will send (vLLM writes through a load plan built from it; hotswap has no such mode
  // and checks instead: docs/architecture.md). Dense backends only; `metadata` is required then.
  bool use_load_plan = false;
  std::optional<std::vector<ParamMeta>> metadata;

  bool uses_unique_id() const { return nccl_unique_id_b64.has_value(); }

  static NcclInitInfo from_json(const nlohmann::json& object);
  // Drops unset optionals, as vLLM's trainer does (`worker_init_payload`).
  nlohmann::json to_json() const;
};

struct NcclUpdateInfo {
  // Empty (every list empty or absent): reuse the previous round's metadata, as vLLM 0.33's
  // worker does; before any round, a round of no parameters.
  std::vector<ParamMeta> params;
  // vLLM 0.34: the group rank that broadcasts every name of this call, 0 .. rank_offset - 1
  // (checked by the engine, which knows rank_offset). Absent means 0, as 0.33 sends it.
  std::int64_t src = 0;
  // E1 per-round packing params; unset means "as agreed at the handshake".
  std::optional<bool> packed;
  std::optional<std::int64_t> packed_buffer_size_bytes;
  std::optional<std::int64_t> packed_num_buffers;

  // The handshake's params with this round's overrides applied.
  PackingParams packing(const PackingParams& handshake) const;

  static NcclUpdateInfo from_json(const nlohmann::json& object);
  nlohmann::json to_json() const;
};

// vLLM's check of `src` against the handshake's broadcasters, with its message.
void check_update_src(std::int64_t src, std::int64_t rank_offset);

// With `use_load_plan`: every parameter of an update must be in the init `metadata`, with the
// same dtype and shape (ValueError naming the first that is not).
void check_against_load_plan(const std::vector<ParamMeta>& manifest,
                             const std::vector<ParamMeta>& update);

using GlooInitInfo = NcclInitInfo;
using GlooUpdateInfo = NcclUpdateInfo;

}  // namespace hotswap::protocol
