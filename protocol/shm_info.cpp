#include "protocol/shm_info.hpp"

#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::protocol {
namespace {
constexpr const char* kInitType = "ShmWeightTransferInitInfo";
constexpr const char* kUpdateType = "ShmWeightTransferUpdateInfo";
}  // namespace

bool is_valid_shm_name(const std::string& name) {
  return name.size() >= 2 && name.size() <= 255 && name[0] == '/' &&
         name.find('/', 1) == std::string::npos && name.find('\0') == std::string::npos;
}

bool is_hotswap_shm_name(const std::string& name) {
  return is_valid_shm_name(name) && name.starts_with(kShmNamePrefix) &&
         name.size() > kShmNamePrefix.size();
}

ShmInitInfo ShmInitInfo::from_json(const nlohmann::json& object) {
  JsonFields fields(object, kInitType, {"segment_names", "packed_buffer_size_bytes", "arena_name"},
                    /*keyword_only=*/true);
  ShmInitInfo info;
  info.segment_names = fields.required_string_list("segment_names");
  if (auto size = fields.optional_int("packed_buffer_size_bytes")) {
    info.packed_buffer_size_bytes = *size;
  }
  info.arena_name = fields.optional_string("arena_name");
  fields.finish();
  const std::string prefix = std::string(kInitType) + ": ";
  if (info.segment_names.empty()) {
    throw ValueError(prefix + "`segment_names` must name at least one shared-memory buffer");
  }
  for (std::size_t i = 0; i < info.segment_names.size(); ++i) {
    if (!is_hotswap_shm_name(info.segment_names[i])) {
      throw ValueError(prefix + "`segment_names[" + std::to_string(i) +
                       "]` must be a hotswap shared-memory name like '/hotswap-1234-0' (the "
                       "prefix /hotswap-, no other '/', at most 255 characters), got '" +
                       info.segment_names[i] + "'");
    }
  }
  if (info.packed_buffer_size_bytes <= 0) {
    throw ValueError(prefix + "`packed_buffer_size_bytes` must be positive, got " +
                     std::to_string(info.packed_buffer_size_bytes));
  }
  if (info.arena_name && !is_hotswap_shm_name(*info.arena_name)) {
    throw ValueError(prefix +
                     "`arena_name` must be a hotswap shared-memory name like "
                     "'/hotswap-1234-arena-0' (the prefix /hotswap-, no other '/', at most 255 "
                     "characters), got '" +
                     *info.arena_name + "'");
  }
  return info;
}

nlohmann::json ShmInitInfo::to_json() const {
  nlohmann::json out = {{"segment_names", segment_names},
                        {"packed_buffer_size_bytes", packed_buffer_size_bytes}};
  if (arena_name) out["arena_name"] = *arena_name;
  return out;
}

ShmUpdateInfo ShmUpdateInfo::from_json(const nlohmann::json& object) {
  JsonFields fields(
      object, kUpdateType,
      {"names", "dtype_names", "shapes", "first_sequence", "arena_offsets", "stream_window_bytes"});
  auto names = fields.required_string_list("names");
  auto dtype_names = fields.required_string_list("dtype_names");
  auto shapes = fields.required_shape_list("shapes");
  auto first = fields.required_int("first_sequence");
  auto offsets = fields.optional_int_list("arena_offsets");
  auto window = fields.optional_int("stream_window_bytes");
  fields.finish();
  const std::string prefix = std::string(kUpdateType) + ": ";
  if (first < 1) {
    throw ValueError(prefix + "`first_sequence` must be at least 1, got " + std::to_string(first));
  }
  if (window && *window < 0) {
    throw ValueError(prefix +
                     "`stream_window_bytes` must be 0 (whole chunks) or a window's size, got " +
                     std::to_string(*window));
  }
  ShmUpdateInfo info{params_from_lists(kUpdateType, names, dtype_names, shapes), first, {}};
  info.stream_window_bytes = window.value_or(0);
  if (offsets) {
    if (offsets->size() != names.size()) {
      throw ValueError(prefix + "`arena_offsets` has " + std::to_string(offsets->size()) +
                       " entries but `names` has " + std::to_string(names.size()));
    }
    for (std::size_t i = 0; i < offsets->size(); ++i) {
      const std::int64_t offset = (*offsets)[i];
      if (offset < kInBuffers) {
        throw ValueError(prefix + "`arena_offsets[" + std::to_string(i) + "]` (" + names[i] +
                         ") must be a byte offset or -1 (in the buffers), got " +
                         std::to_string(offset));
      }
      if (offset != kInBuffers && offset % item_size(info.params[i].dtype) != 0) {
        throw ValueError(prefix + "`arena_offsets[" + std::to_string(i) + "]` (" + names[i] +
                         ") is " + std::to_string(offset) + ", not aligned for its dtype " +
                         std::string(dtype_name(info.params[i].dtype)));
      }
    }
    info.arena_offsets = std::move(*offsets);
  }
  return info;
}

std::vector<ParamMeta> ShmUpdateInfo::buffered_params(std::vector<std::size_t>* indices) const {
  std::vector<ParamMeta> out;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (in_arena(i)) continue;
    out.push_back(params[i]);
    if (indices != nullptr) indices->push_back(i);
  }
  return out;
}

nlohmann::json ShmUpdateInfo::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  write_param_lists(params, out);
  out["first_sequence"] = first_sequence;
  if (!arena_offsets.empty()) out["arena_offsets"] = arena_offsets;
  // Only when used: a worker of an older build refuses fields it does not know.
  if (stream_window_bytes > 0) out["stream_window_bytes"] = stream_window_bytes;
  return out;
}

}  // namespace hotswap::protocol
