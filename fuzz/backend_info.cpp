// Every backend's init_info / update_info parser and WeightTransferConfig, on any JSON object.
// The first byte picks the parser; the rest is the payload. A payload a parser accepts must be
// one the engines can rely on, and must survive to_json() and back unchanged.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.hpp"
#include "protocol/bounded_json.hpp"
#include "protocol/disk_info.hpp"
#include "protocol/errors.hpp"
#include "protocol/ipc_info.hpp"
#include "protocol/nccl_info.hpp"
#include "protocol/param_meta.hpp"
#include "protocol/shm_info.hpp"
#include "protocol/sparse_nccl_info.hpp"
#include "protocol/weight_transfer_config.hpp"

namespace {

using namespace hotswap;
using nlohmann::json;

// Every buffer is sized from these: an accepted payload's sizes must compute.
void check_params(const std::vector<protocol::ParamMeta>& params) {
  for (const auto& p : params)
    fuzz::must_succeed("ParamMeta::nbytes()", [&] { return p.nbytes(); });
}

// Accepted once, accepted again from its own to_json(), which then reads the same.
template <class Info>
void check_round_trip(const Info& info) {
  const json once = info.to_json();
  const json again =
      fuzz::must_succeed("from_json(to_json())", [&] { return Info::from_json(once).to_json(); });
  HOTSWAP_FUZZ_CHECK(again == once);
}

void check(const protocol::NcclInitInfo& info) {
  HOTSWAP_FUZZ_CHECK(info.world_size >= 1);
  HOTSWAP_FUZZ_CHECK(info.rank_offset >= 0 && info.rank_offset < info.world_size);
  HOTSWAP_FUZZ_CHECK(info.uses_unique_id() ||
                     (info.master_address && !info.master_address->empty() && info.master_port));
  HOTSWAP_FUZZ_CHECK(!info.uses_unique_id() ||
                     info.nccl_unique_id.size() == protocol::kNcclUniqueIdBytes);
  HOTSWAP_FUZZ_CHECK(info.packing.packed_buffer_size_bytes > 0);
  HOTSWAP_FUZZ_CHECK(info.packing.packed_num_buffers >= 1);
  HOTSWAP_FUZZ_CHECK(!info.use_load_plan || info.metadata.has_value());
  if (info.metadata) check_params(*info.metadata);
  check_round_trip(info);
}

void check(const protocol::NcclUpdateInfo& info) {
  check_params(info.params);
  HOTSWAP_FUZZ_CHECK(!info.packed_buffer_size_bytes || *info.packed_buffer_size_bytes > 0);
  HOTSWAP_FUZZ_CHECK(!info.packed_num_buffers || *info.packed_num_buffers >= 1);
  check_round_trip(info);
}

void check(const protocol::SparseNcclUpdateInfo& info) {
  check_params(info.params);
  HOTSWAP_FUZZ_CHECK(!info.num_updates_list.empty());
  HOTSWAP_FUZZ_CHECK(info.num_updates_list.size() == info.params.size());
  for (std::size_t i = 0; i < info.params.size(); ++i) {
    HOTSWAP_FUZZ_CHECK(info.num_updates_list[i] >= 0);
    HOTSWAP_FUZZ_CHECK(static_cast<std::uint64_t>(info.num_updates_list[i]) <=
                       info.params[i].numel());
  }
  check_round_trip(info);
}

void check(const protocol::IpcInitInfo& info) {
  check_round_trip(info);
}

void check(const protocol::IpcUpdateInfo& info) {
  check_params(info.params);
  if (!info.is_packed()) {
    HOTSWAP_FUZZ_CHECK(info.handles.size() == info.params.size());
    for (std::size_t i = 0; i < info.handles.size(); ++i) {
      HOTSWAP_FUZZ_CHECK(!info.handles[i].empty());
      for (const auto& [uuid, handle] : info.handles[i]) {
        HOTSWAP_FUZZ_CHECK(handle.handle.size() == protocol::kCudaIpcHandleBytes);
        HOTSWAP_FUZZ_CHECK(handle.size_bytes == info.params[i].nbytes());
      }
    }
  } else {
    // The receiver maps the exported buffer and reads every tensor of the chunk out of it.
    HOTSWAP_FUZZ_CHECK(info.tensor_sizes.size() == info.params.size());
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < info.tensor_sizes.size(); ++i) {
      HOTSWAP_FUZZ_CHECK(info.tensor_sizes[i] == info.params[i].nbytes());
      HOTSWAP_FUZZ_CHECK(!__builtin_add_overflow(total, info.tensor_sizes[i], &total));
    }
    HOTSWAP_FUZZ_CHECK(!info.packed_handle->empty());
    for (const auto& [uuid, handle] : *info.packed_handle) {
      HOTSWAP_FUZZ_CHECK(handle.handle.size() == protocol::kCudaIpcHandleBytes);
      HOTSWAP_FUZZ_CHECK(total <= handle.size_bytes);
    }
  }
  check_round_trip(info);
}

void check(const protocol::ShmInitInfo& info) {
  HOTSWAP_FUZZ_CHECK(!info.segment_names.empty());
  for (const auto& name : info.segment_names)
    HOTSWAP_FUZZ_CHECK(protocol::is_hotswap_shm_name(name));
  HOTSWAP_FUZZ_CHECK(!info.arena_name || protocol::is_hotswap_shm_name(*info.arena_name));
  HOTSWAP_FUZZ_CHECK(info.packed_buffer_size_bytes > 0);
  check_round_trip(info);
}

void check(const protocol::ShmUpdateInfo& info) {
  check_params(info.params);
  HOTSWAP_FUZZ_CHECK(info.first_sequence >= 1);
  HOTSWAP_FUZZ_CHECK(info.arena_offsets.empty() || info.arena_offsets.size() == info.params.size());
  for (std::size_t i = 0; i < info.arena_offsets.size(); ++i)
    HOTSWAP_FUZZ_CHECK(info.arena_offsets[i] >= protocol::ShmUpdateInfo::kInBuffers);
  std::vector<std::size_t> indices;
  auto buffered = info.buffered_params(&indices);
  HOTSWAP_FUZZ_CHECK(buffered.size() == indices.size() && buffered.size() <= info.params.size());
  check_round_trip(info);
}

void check(const protocol::DiskInitInfo& info) {
  check_round_trip(info);
}

void check(const protocol::DiskUpdateInfo& info) {
  HOTSWAP_FUZZ_CHECK(!info.path.empty() && info.path.front() == '/');
  check_round_trip(info);
}

void check(const protocol::WeightTransferConfig& config) {
  HOTSWAP_FUZZ_CHECK(!config.backend.empty());
  check_round_trip(config);
}

template <class Info>
void run(const json& object) {
  std::optional<Info> info;
  try {
    info = Info::from_json(object);
  } catch (const protocol::Error& e) {
    fuzz::check_error_reply(e);
    return;
  }
  check(*info);  // outside the try: an error from an accepted payload escapes, a finding
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t selector = data[0];
  auto parsed = protocol::parse_bounded_json(fuzz::as_text(data + 1, size - 1));
  if (!parsed.ok() || !parsed.value.is_object()) return 0;
  const json& object = parsed.value;
  switch (selector % 10) {
    case 0:
      run<protocol::NcclInitInfo>(object);
      break;
    case 1:
      run<protocol::NcclUpdateInfo>(object);
      break;
    case 2:
      run<protocol::SparseNcclUpdateInfo>(object);
      break;
    case 3:
      run<protocol::IpcInitInfo>(object);
      break;
    case 4:
      run<protocol::IpcUpdateInfo>(object);
      break;
    case 5:
      run<protocol::ShmInitInfo>(object);
      break;
    case 6:
      run<protocol::ShmUpdateInfo>(object);
      break;
    case 7:
      run<protocol::DiskInitInfo>(object);
      break;
    case 8:
      run<protocol::DiskUpdateInfo>(object);
      break;
    case 9:
      run<protocol::WeightTransferConfig>(object);
      break;
  }
  return 0;
}
